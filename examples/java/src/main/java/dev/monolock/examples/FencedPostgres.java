package dev.monolock.examples;

import dev.monolock.LockLostException;
import dev.monolock.MonolockClient;
import dev.monolock.MonolockException;
import dev.monolock.MonolockLock;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Optional;
import java.util.Properties;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A job that takes a lock and writes its result to PostgreSQL, fenced by
 * the lock's token: a holder that was paused past its lease and resumed
 * after a newer holder wrote finds its write refused (0 rows) and stops.
 *
 * <pre>
 * cd clients/java &amp;&amp; mvn -q -B -DskipTests -pl ../../examples/java -am package
 * DATABASE_URL=postgres://app@db.internal/app java -cp 'examples/java/target/classes:examples/java/target/lib/*' \
 *     dev.monolock.examples.FencedPostgres --job nightly-import
 * </pre>
 *
 * Exit codes are those of {@code monolock exec}: 0 written, 64 usage, 69
 * lock server or database unreachable, 75 busy with --no-wait, 79 the lock
 * was lost or the write was fenced off, 1 another database error.
 */
public final class FencedPostgres {
    static final String PROGRAM = "FencedPostgres";
    static final int USAGE = 64;
    static final int UNAVAILABLE = 69;
    static final int NOT_ACQUIRED = 75;
    static final int LOST = 79;
    static final int FAILURE = 1;

    /** Why the job stops: one line for stderr and the exit code. */
    static final class Failure extends Exception {
        private static final long serialVersionUID = 1L;
        final int code;

        Failure(int code, String message) {
            super(message, null, false, false);
            this.code = code;
        }
    }

    record Args(String job, String databaseUrl, String server, Duration lease, boolean noWait, String result) {}

    public static void main(String[] argv) {
        int code;
        try {
            run(parse(argv));
            code = 0;
        } catch (Failure failure) {
            System.err.println(PROGRAM + ": " + failure.getMessage());
            code = failure.code;
        }
        System.exit(code);
    }

    static void run(Args args) throws Failure {
        // The database first: a job that cannot write should not take the lock.
        if (args.databaseUrl() == null || args.databaseUrl().isEmpty()) {
            throw new Failure(USAGE, "no database to write to: set DATABASE_URL or pass --database-url");
        }
        try (Connection db = connect(args.databaseUrl());
                MonolockClient client = MonolockClient.create(args.server());
                MonolockLock lock = acquire(client, args)) {
            holding(args, db, lock);
        } catch (SQLException closing) {
            // Only the close of the connection can land here: the work is done or has failed already.
        }
    }

    /** The job while it holds the lock: work, check, (pause,) fenced write, release. */
    static void holding(Args args, Connection db, MonolockLock lock) throws Failure {
        say("holding " + args.job() + " under token " + Long.toUnsignedString(lock.token()));
        String result = args.result() != null ? args.result() : "imported by pid " + ProcessHandle.current().pid();
        // Check right before the write, and fence the write anyway: a pause
        // can strike between the check and the write.
        try {
            lock.check();
        } catch (LockLostException loss) {
            throw new Failure(LOST, "lost the lock before writing: " + loss.getMessage());
        }
        String pause = System.getenv().getOrDefault("PAUSE_BEFORE_WRITE", "").toLowerCase(Locale.ROOT);
        if (!List.of("", "0", "false", "no", "off").contains(pause)) {
            pause();
        }
        boolean written;
        try {
            written = write(db, args.job(), lock.token(), result);
        } catch (SQLException err) {
            throw new Failure(FAILURE, "writing " + args.job() + ": " + oneLine(err, args.databaseUrl()));
        }
        if (!written) {
            throw new Failure(LOST, "fenced off: a newer holder of " + args.job() + " has written; token "
                    + Long.toUnsignedString(lock.token()) + " refused");
        }
        say("wrote " + args.job() + " under token " + Long.toUnsignedString(lock.token()));
        try {
            lock.release();
        } catch (LockLostException loss) {
            throw new Failure(LOST, "the lock was lost before the end (the write itself was fenced): "
                    + loss.getMessage());
        }
    }

    /** Queues for the lock (or only tries, with --no-wait). */
    static MonolockLock acquire(MonolockClient client, Args args) throws Failure {
        Optional<MonolockLock> lock;
        try {
            lock = args.noWait() ? client.tryLock(args.job(), args.lease())
                    : Optional.of(client.lock(args.job(), args.lease()));
        } catch (MonolockException err) {
            throw new Failure(err.isTemporary() ? UNAVAILABLE : USAGE,
                    "cannot acquire lock \"" + args.job() + "\": " + err.getMessage());
        } catch (IllegalArgumentException err) {
            throw new Failure(USAGE, "cannot acquire lock \"" + args.job() + "\": " + err.getMessage());
        } catch (InterruptedException err) {
            Thread.currentThread().interrupt();
            throw new Failure(UNAVAILABLE, "interrupted while waiting for lock \"" + args.job() + "\"");
        }
        return lock.orElseThrow(() -> new Failure(NOT_ACQUIRED, "lock \"" + args.job() + "\" is busy"));
    }

    /**
     * Connects to the database given as {@code postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE};
     * messages never repeat the URL, which may hold a password.
     */
    static Connection connect(String url) throws Failure {
        Matcher parts = Pattern.compile("^postgres(?:ql)?://(?:([^:@/]+)(?::([^@/]*))?@)?([^:/?#\\[\\]]+)(?::(\\d+))?/([^?#]+)$")
                .matcher(url);
        if (!parts.matches()) {
            throw new Failure(USAGE, "invalid DATABASE_URL: expected postgres://USER@HOST:PORT/DATABASE");
        }
        Properties properties = new Properties();
        if (parts.group(1) != null) {
            properties.setProperty("user", parts.group(1));
        }
        if (parts.group(2) != null) {
            properties.setProperty("password", parts.group(2));
        }
        properties.setProperty("connectTimeout", "5");
        String jdbc = "jdbc:postgresql://" + parts.group(3) + ":" + (parts.group(4) == null ? "5432" : parts.group(4))
                + "/" + parts.group(5);
        try {
            return DriverManager.getConnection(jdbc, properties);
        } catch (SQLException err) {
            throw new Failure(UNAVAILABLE, "cannot connect to the database: " + oneLine(err, url));
        }
    }

    /** The statement every form of the recipe runs (examples/sql/fenced-write.sql), {@code $N} made JDBC's {@code ?}. */
    static final String FENCED_WRITE = resource("/fenced-write.sql").lines()
            .filter(line -> !line.stripLeading().startsWith("--"))
            .collect(java.util.stream.Collectors.joining("\n"));

    /**
     * Writes {@code result} for {@code job} under {@code token} (a u64 in a
     * Java long). False: the row holds a newer token, the write was refused
     * and this holder must stop. The token travels as decimal text into a
     * numeric(20,0) column: PostgreSQL has no unsigned 64-bit type and a
     * bigint stops at 2^63 - 1.
     */
    public static boolean write(Connection db, String job, long token, String result) throws SQLException {
        List<String> values = List.of(job, Long.toUnsignedString(token), result);
        List<Integer> order = new ArrayList<>();
        Matcher placeholder = Pattern.compile("\\$(\\d)").matcher(FENCED_WRITE);
        StringBuilder sql = new StringBuilder();
        while (placeholder.find()) {
            order.add(Integer.parseInt(placeholder.group(1)));
            placeholder.appendReplacement(sql, "?");
        }
        placeholder.appendTail(sql);
        try (PreparedStatement statement = db.prepareStatement(sql.toString())) {
            for (int i = 0; i < order.size(); i++) {
                statement.setString(i + 1, values.get(order.get(i) - 1));
            }
            return statement.executeUpdate() == 1;
        }
    }

    private static String resource(String name) {
        try (InputStream in = FencedPostgres.class.getResourceAsStream(name)) {
            if (in == null) {
                throw new IllegalStateException(name + " is missing from the classpath");
            }
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        } catch (IOException err) {
            throw new IllegalStateException(err);
        }
    }

    /** Stops this process as a GC pause or a suspended VM would; returns once it is continued (kill -CONT). */
    static void pause() {
        long pid = ProcessHandle.current().pid();
        System.err.println(PROGRAM + ": pausing before the write (kill -CONT " + pid + ")");
        System.err.flush();
        try {
            new ProcessBuilder("kill", "-STOP", Long.toString(pid)).start().waitFor();
        } catch (IOException | InterruptedException err) {
            throw new IllegalStateException("cannot pause: " + err.getMessage(), err);
        }
    }

    static void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static String oneLine(Exception err, String secret) {
        String text = String.join(" ", String.valueOf(err.getMessage()).trim().split("\\s+"));
        return secret == null ? text : text.replace(secret, "...");
    }

    /** A duration as {@code monolock exec --lease} takes it (500ms, 2s, 1m, 1h). */
    static Duration duration(String text) throws Failure {
        Matcher match = Pattern.compile("^\\s*(\\d+)\\s*(ms|s|m|h)\\s*$").matcher(text);
        if (!match.matches()) {
            throw new Failure(USAGE, "invalid duration \"" + text + "\" (e.g. 500ms, 2s, 1m)");
        }
        long n = Long.parseLong(match.group(1));
        return switch (match.group(2)) {
            case "ms" -> Duration.ofMillis(n);
            case "s" -> Duration.ofSeconds(n);
            case "m" -> Duration.ofMinutes(n);
            default -> Duration.ofHours(n);
        };
    }

    static Args parse(String[] argv) throws Failure {
        String job = "nightly-import";
        String databaseUrl = System.getenv("DATABASE_URL");
        String server = System.getenv("MONOLOCK_ADDRESS");
        if (server == null || server.isEmpty()) {
            server = "127.0.0.1:7070";
        }
        String lease = "2s";
        boolean noWait = false;
        String result = null;
        for (int i = 0; i < argv.length; i++) {
            String option = argv[i];
            if (option.equals("--no-wait")) {
                noWait = true;
                continue;
            }
            if (i + 1 >= argv.length || !List.of("--job", "--database-url", "--server", "--lease", "--result")
                    .contains(option)) {
                throw new Failure(USAGE, "unknown or incomplete option " + option
                        + " (options: --job, --database-url, --server, --lease, --no-wait, --result)");
            }
            String value = argv[++i];
            switch (option) {
                case "--job" -> job = value;
                case "--database-url" -> databaseUrl = value;
                case "--server" -> server = value;
                case "--lease" -> lease = value;
                default -> result = value;
            }
        }
        return new Args(job, databaseUrl, server, duration(lease), noWait, result);
    }
}
