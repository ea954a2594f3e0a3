/** The tests of client.test.ts, forced to protocol v1. */
import "./force-v1.js";
import "./client.test.js";
