package dev.monolock.conformance;

import dev.monolock.ConnectFailedException;
import dev.monolock.LeaderElection;
import dev.monolock.LockLostException;
import dev.monolock.LockNotAcquiredException;
import dev.monolock.LockState;
import dev.monolock.LossReason;
import dev.monolock.MonolockClient;
import dev.monolock.MonolockException;
import dev.monolock.MonolockLock;
import dev.monolock.MonolockTls;
import dev.monolock.Observation;
import dev.monolock.ObservationEndedException;
import dev.monolock.ServerRefusedException;
import dev.monolock.TlsFailedException;
import dev.monolock.UnsupportedFeatureException;
import dev.monolock.testkit.Json;
import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.Optional;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.stream.Stream;
import javax.net.ssl.SSLContext;

/**
 * The Java client's driver for the conformance suite
 * (clients/conformance/DRIVER.md): one JSON command per line on standard
 * input, one JSON reply per line on standard output, in order. A thin shell
 * around the client's public API, with no protocol logic of its own.
 */
public final class Driver {
    private MonolockClient client;
    private final Map<String, MonolockLock> locks = new LinkedHashMap<>();
    private final Map<String, Observation> observations = new LinkedHashMap<>();
    private final Map<String, Election> elections = new LinkedHashMap<>();

    /** A running election helper and its callbacks' events, queued in the order they fired. */
    private record Election(LeaderElection election, BlockingQueue<Map<String, Object>> events) {}

    /** A failed command: its reply's error object. */
    private static final class Failure extends Exception {
        private static final long serialVersionUID = 1L;
        final String kind;
        final String reason;
        final boolean temporary;

        Failure(String kind, String reason, String message, boolean temporary) {
            super(message, null, false, false);
            this.kind = kind;
            this.reason = reason;
            this.temporary = temporary;
        }
    }

    public static void main(String[] args) throws IOException {
        Driver driver = new Driver();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
        String line;
        while ((line = in.readLine()) != null) {
            line = line.trim();
            if (line.isEmpty()) {
                continue;
            }
            Map<String, Object> reply;
            Object id = null;
            String cmd = null;
            try {
                @SuppressWarnings("unchecked")
                Map<String, Object> command = (Map<String, Object>) Json.parse(line);
                id = command.get("id");
                cmd = String.valueOf(command.get("cmd"));
                reply = driver.handle(cmd, command);
            } catch (ClassCastException | IllegalArgumentException | IndexOutOfBoundsException err) {
                reply = failed(new Failure("other", null,
                        "the command is not a JSON object of the driver protocol: " + err.getMessage(), false));
            }
            reply.put("id", id);
            out.println(Json.write(reply));
            out.flush();
            if ("exit".equals(cmd)) {
                break;
            }
        }
        driver.releaseAll();
        if (driver.client != null) {
            driver.client.close();
        }
        System.exit(0);
    }

    private static Map<String, Object> failed(Failure failure) {
        Map<String, Object> error = new LinkedHashMap<>();
        error.put("kind", failure.kind);
        error.put("reason", failure.reason);
        error.put("message", failure.getMessage());
        error.put("temporary", failure.temporary);
        Map<String, Object> reply = new LinkedHashMap<>();
        reply.put("ok", false);
        reply.put("error", error);
        return reply;
    }

    private Map<String, Object> handle(String cmd, Map<String, Object> command) {
        Map<String, Object> reply = new LinkedHashMap<>();
        try {
            reply.put("ok", true);
            run(cmd, command, reply);
            return reply;
        } catch (Failure failure) {
            return failed(failure);
        } catch (RuntimeException err) {
            return failed(classify(err));
        }
    }

    private void run(String cmd, Map<String, Object> c, Map<String, Object> reply) throws Failure {
        switch (cmd) {
            case "open" -> open(c);
            case "exit" -> releaseAll();
            case "stats" -> stats(reply);
            case "lock" -> {
                Object waitMs = c.get("wait_ms");
                MonolockLock lock;
                try {
                    lock = waitMs == null
                            ? client().lock(name(c), lease(c), value(c))
                            : client().lock(name(c), lease(c), Duration.ofMillis(number(waitMs)), value(c));
                } catch (InterruptedException err) {
                    Thread.currentThread().interrupt();
                    throw new Failure("other", null, "interrupted", true);
                }
                keep(handleOf(c), lock);
                reply.put("token", Long.toUnsignedString(lock.token()));
            }
            case "try_lock" -> {
                Optional<MonolockLock> lock = client().tryLock(name(c), lease(c), value(c));
                reply.put("acquired", lock.isPresent());
                if (lock.isPresent()) {
                    keep(handleOf(c), lock.get());
                    reply.put("token", Long.toUnsignedString(lock.get().token()));
                }
            }
            case "cycles" -> {
                long count = number(c.get("count"));
                MonolockClient client = client();
                for (long i = 0; i < count; i++) {
                    try {
                        client.lock(name(c), lease(c)).release();
                    } catch (InterruptedException err) {
                        Thread.currentThread().interrupt();
                        throw new Failure("other", null, "interrupted", true);
                    }
                }
                reply.put("count", count);
            }
            case "release" -> {
                MonolockLock lock = lock(c);
                locks.remove(handleOf(c));
                lock.release();
            }
            case "is_held" -> reply.put("held", lock(c).isHeld());
            case "check" -> lock(c).check();
            case "token" -> reply.put("token", Long.toUnsignedString(lock(c).token()));
            case "wait_lost" -> {
                MonolockLock lock = lock(c);
                try {
                    LockLostException loss = lock.lost().get(number(c.get("timeout_ms")), TimeUnit.MILLISECONDS);
                    reply.put("lost", true);
                    reply.put("reason", loss.reason().wireName());
                    reply.put("message", loss.getMessage());
                } catch (TimeoutException err) {
                    reply.put("lost", false);
                } catch (InterruptedException | ExecutionException err) {
                    throw new Failure("other", null, "waiting for the loss failed: " + err, false);
                }
            }
            case "set_value" -> lock(c).setValue(value(c));
            case "observe" -> {
                Observation observation;
                try {
                    observation = client().observe(name(c));
                } catch (InterruptedException err) {
                    Thread.currentThread().interrupt();
                    throw new Failure("other", null, "interrupted", true);
                }
                Observation previous = observations.put(handleOf(c), observation);
                if (previous != null) {
                    previous.close();
                }
                reply.put("state", state(observation.next()));
            }
            case "next_state" -> {
                Observation observation = observation(c);
                try {
                    Optional<LockState> state = observation.next(Duration.ofMillis(number(c.get("timeout_ms"))));
                    if (state.isPresent()) {
                        reply.put("state", state(state.get()));
                    } else {
                        reply.put("timeout", true);
                    }
                } catch (InterruptedException err) {
                    Thread.currentThread().interrupt();
                    throw new Failure("other", null, "interrupted", true);
                } catch (NoSuchElementException err) {
                    throw new Failure("other", null, err.getMessage(), false);
                }
            }
            case "unobserve" -> {
                Observation observation = observation(c);
                observations.remove(handleOf(c));
                observation.close();
            }
            case "holder" -> reply.put("state", state(client().holder(name(c))));
            case "elect" -> elect(c);
            case "next_election_event" -> {
                Election election = election(c);
                try {
                    Map<String, Object> event = election.events().poll(number(c.get("timeout_ms")),
                            TimeUnit.MILLISECONDS);
                    if (event == null) {
                        reply.put("timeout", true);
                    } else {
                        reply.put("event", event);
                    }
                } catch (InterruptedException err) {
                    Thread.currentThread().interrupt();
                    throw new Failure("other", null, "interrupted", true);
                }
            }
            case "resign" -> {
                Election election = election(c);
                elections.remove(handleOf(c));
                election.election().close();
            }
            default -> throw new Failure("other", null, "unknown command \"" + cmd + "\"", false);
        }
    }

    /** Starts the client's election helper; its callbacks queue the events {@code next_election_event} reads. */
    private void elect(Map<String, Object> c) throws Failure {
        BlockingQueue<Map<String, Object>> events = new LinkedBlockingQueue<>();
        LeaderElection election = client().leaderElection(name(c), lease(c), value(c), new LeaderElection.Listener() {
            @Override
            public void isLeader(long token) {
                Map<String, Object> event = new LinkedHashMap<>();
                event.put("kind", "started_leading");
                event.put("token", Long.toUnsignedString(token));
                events.add(event);
            }

            @Override
            public void notLeader() {
                Map<String, Object> event = new LinkedHashMap<>();
                event.put("kind", "stopped_leading");
                events.add(event);
            }

            @Override
            public void onNewLeader(LockState leader) {
                Map<String, Object> event = new LinkedHashMap<>();
                event.put("kind", "new_leader");
                event.put("token", Long.toUnsignedString(leader.token()));
                event.put("value", leader.value());
                events.add(event);
            }
        });
        try {
            election.start();
        } catch (InterruptedException err) {
            Thread.currentThread().interrupt();
            throw new Failure("other", null, "interrupted", true);
        }
        Election previous = elections.put(handleOf(c), new Election(election, events));
        if (previous != null) {
            previous.election().close();
        }
    }

    /** A state in the driver protocol's shape ({@code since} is not sent). */
    private static Map<String, Object> state(LockState state) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("held", state.held());
        out.put("token", Long.toUnsignedString(state.token()));
        out.put("value", state.value());
        out.put("event", state.event().wireName());
        out.put("initial", state.initial());
        out.put("coalesced", state.coalesced());
        out.put("reason", state.reason().map(LockState.ReleaseReason::wireName).orElse(null));
        return out;
    }

    private Observation observation(Map<String, Object> c) throws Failure {
        Observation observation = observations.get(handleOf(c));
        if (observation == null) {
            throw new Failure("unknown_handle", null, "no watch handle \"" + handleOf(c) + "\"", false);
        }
        return observation;
    }

    private Election election(Map<String, Object> c) throws Failure {
        Election election = elections.get(handleOf(c));
        if (election == null) {
            throw new Failure("unknown_handle", null, "no election handle \"" + handleOf(c) + "\"", false);
        }
        return election;
    }

    private static String value(Map<String, Object> c) {
        Object value = c.get("value");
        return value == null ? "" : value.toString();
    }

    private void open(Map<String, Object> c) throws Failure {
        MonolockClient.Builder builder = MonolockClient.builder(String.valueOf(c.get("address")));
        if (Boolean.TRUE.equals(c.get("force_v1"))) {
            builder.forceV1();
        }
        if (c.get("tls") instanceof Map<?, ?> tls) {
            Object ca = tls.get("ca");
            Object cert = tls.get("cert");
            Object key = tls.get("key");
            if (ca == null) {
                throw new Failure("tls", null, "the TLS settings name no CA file", false);
            }
            SSLContext context;
            try {
                context = cert != null && key != null
                        ? MonolockTls.mutual(Path.of(ca.toString()), Path.of(cert.toString()), Path.of(key.toString()))
                        : MonolockTls.trusting(Path.of(ca.toString()));
            } catch (IllegalArgumentException err) {
                throw new Failure("tls", null, err.getMessage(), false);
            }
            builder.tls(context);
            if (tls.get("server_name") instanceof String serverName && !serverName.isEmpty()) {
                builder.serverName(serverName);
            }
        }
        MonolockClient previous = client;
        client = builder.build();
        if (previous != null && locks.isEmpty()) {
            previous.close();
        }
    }

    private MonolockClient client() throws Failure {
        if (client == null) {
            throw new Failure("other", null, "no client: send open first", false);
        }
        return client;
    }

    private static String name(Map<String, Object> c) {
        Object name = c.get("name");
        return name == null ? "" : name.toString();
    }

    private static Duration lease(Map<String, Object> c) {
        // A fractional lease_ms is passed on exactly (to the microsecond), so
        // that the client itself refuses a lease that is not whole ms.
        Object value = c.get("lease_ms");
        if (value instanceof Double d && d < Long.MAX_VALUE / 1_000_000.0 && d != Math.floor(d)) {
            return Duration.ofNanos(Math.round(d * 1_000.0) * 1_000L);
        }
        return Duration.ofMillis(number(value));
    }

    private static long number(Object value) {
        if (value instanceof Long n) {
            return n;
        }
        if (value instanceof Double d) {
            if (d > Long.MAX_VALUE) {
                return Long.MAX_VALUE;
            }
            return d.longValue();
        }
        throw new IllegalArgumentException("expected a number, got " + value);
    }

    private static String handleOf(Map<String, Object> c) {
        return String.valueOf(c.get("handle"));
    }

    private MonolockLock lock(Map<String, Object> c) throws Failure {
        MonolockLock lock = locks.get(handleOf(c));
        if (lock == null) {
            throw new Failure("unknown_handle", null, "no lock handle \"" + handleOf(c) + "\"", false);
        }
        return lock;
    }

    private void keep(String handle, MonolockLock lock) {
        MonolockLock previous = locks.put(handle, lock);
        if (previous != null) {
            previous.close();
        }
    }

    private void releaseAll() {
        for (Election election : elections.values()) {
            election.election().close();
        }
        elections.clear();
        for (Observation observation : observations.values()) {
            observation.close();
        }
        observations.clear();
        for (MonolockLock lock : locks.values()) {
            lock.close();
        }
        locks.clear();
    }

    /** Maps the client's exceptions to the driver protocol's kinds. */
    private static Failure classify(RuntimeException err) {
        String message = String.valueOf(err.getMessage());
        if (err instanceof IllegalArgumentException) {
            return new Failure("invalid_argument", null, message, false);
        }
        boolean temporary = err instanceof MonolockException m && m.isTemporary();
        if (err instanceof UnsupportedFeatureException) {
            return new Failure("unsupported", null, message, temporary);
        }
        if (err instanceof LockNotAcquiredException) {
            return new Failure("not_acquired", null, message, temporary);
        }
        if (err instanceof TlsFailedException) {
            return new Failure("tls", null, message, temporary);
        }
        if (err instanceof ConnectFailedException) {
            return new Failure("connect", null, message, temporary);
        }
        if (err instanceof ObservationEndedException ended) {
            return new Failure("lost", ended.reason().wireName(), message, temporary);
        }
        if (err instanceof LockLostException lost) {
            String kind = lost.reason() == LossReason.SERVER_ERROR ? "server" : "lost";
            return new Failure(kind, lost.reason().wireName(), message, temporary);
        }
        if (err instanceof ServerRefusedException) {
            return new Failure("server", null, message, temporary);
        }
        return new Failure("other", null, err.getClass().getSimpleName() + ": " + message, temporary);
    }

    private static void stats(Map<String, Object> reply) {
        try (Stream<Path> fds = Files.list(Path.of("/proc/self/fd"))) {
            reply.put("fds", fds.count() - 1);
        } catch (IOException ignored) {
            // Not Linux: the runner reads /proc itself.
        }
        reply.put("threads", Thread.getAllStackTraces().size());
    }
}
