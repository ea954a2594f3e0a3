/** The tests of tls.test.ts, forced to protocol v1. */
import "./force-v1.js";
import "./tls.test.js";
