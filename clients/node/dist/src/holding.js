/**
 * What a `Lock` needs of the claim behind it, whatever the protocol
 * version: a v1 connection of its own (`io/session.ts`) or one claim of a
 * pooled v2 session (`v2/session.ts`).
 *
 * @module
 */
export {};
//# sourceMappingURL=holding.js.map