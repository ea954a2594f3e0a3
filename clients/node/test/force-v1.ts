/**
 * Imported first by the `*.v1.test.ts` files: the tests they import next
 * run forced to protocol v1 (`support.ts` reads this when it loads).
 */
process.env.MONOLOCK_NODE_PROTOCOL = "1";
