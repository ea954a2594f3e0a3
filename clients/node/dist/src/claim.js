/**
 * What the I/O session needs of a claim, whatever the protocol version: a
 * sans-I/O machine fed bytes and instants that says where the claim is,
 * when to look again, and when a heartbeat is due. Protocol v1's is
 * `v1/claim.ts`; another version brings its own behind the same shape.
 *
 * @module
 */
export {};
//# sourceMappingURL=claim.js.map