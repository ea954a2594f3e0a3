/** The tests of process.test.ts, forced to protocol v1. */
import "./force-v1.js";
import "./process.test.js";
