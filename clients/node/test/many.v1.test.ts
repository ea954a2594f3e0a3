/** The tests of many.test.ts, forced to protocol v1. */
import "./force-v1.js";
import "./many.test.js";
