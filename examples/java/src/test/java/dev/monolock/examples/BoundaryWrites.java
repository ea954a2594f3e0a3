package dev.monolock.examples;

import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.Statement;

/**
 * For examples/tests/fenced_postgres.rs: the recipe's {@code write} once per
 * token (decimal u64), in order, printing for each the token, whether it
 * was written, and the token the row then holds. Arguments: the database
 * URL, then the tokens.
 */
public final class BoundaryWrites {
    public static void main(String[] args) throws Exception {
        try (Connection db = FencedPostgres.connect(args[0])) {
            for (int i = 1; i < args.length; i++) {
                boolean written = FencedPostgres.write(db, "nightly-import", Long.parseUnsignedLong(args[i]), "boundary");
                try (Statement query = db.createStatement();
                        ResultSet row = query.executeQuery(
                                "SELECT token::text FROM job_state WHERE job = 'nightly-import'")) {
                    row.next();
                    System.out.println(args[i] + " " + written + " " + row.getString(1));
                }
            }
        }
    }
}
