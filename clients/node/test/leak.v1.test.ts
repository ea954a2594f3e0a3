/** The tests of leak.test.ts, forced to protocol v1. */
import "./force-v1.js";
import "./leak.test.js";
