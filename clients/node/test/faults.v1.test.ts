/** The tests of faults.test.ts, forced to protocol v1. */
import "./force-v1.js";
import "./faults.test.js";
