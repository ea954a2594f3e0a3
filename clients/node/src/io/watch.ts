/**
 * Waiting for a claim's status to change: the driver wakes its watchers
 * whenever anything happens, and each waiter looks again.
 *
 * @module
 */

import type { Status } from "../claim.js";
import type { Nanos } from "../schedule.js";
import { Alarm, now } from "./clock.js";

/** How a wait for the claim ended. */
export type WaitEnd = "ready" | "lost" | "timeout" | "aborted";

/** Something with a status (checked against the clock) and watchers. */
export abstract class Watched {
  readonly #watchers = new Set<() => void>();

  /** The status now. */
  abstract status(): Status;

  /** Wakes every waiter. */
  protected notify(): void {
    for (const watcher of [...this.#watchers]) watcher();
  }

  /**
   * Waits until `ready(status)`, the loss, `until` (an instant; null: no
   * bound) or `abort`, whichever comes first.
   */
  waitUntil(
    ready: (status: Status) => boolean,
    until: Nanos | null,
    abort?: AbortSignal,
  ): Promise<WaitEnd> {
    return new Promise<WaitEnd>((resolve) => {
      const alarm = new Alarm();
      let done = false;
      const finish = (end: WaitEnd): void => {
        if (done) return;
        done = true;
        this.#watchers.delete(look);
        alarm.cancel();
        abort?.removeEventListener("abort", onAbort);
        resolve(end);
      };
      const look = (): void => {
        const status = this.status();
        if (ready(status)) finish("ready");
        else if (status === "lost") finish("lost");
      };
      const onAbort = (): void => finish("aborted");
      if (abort?.aborted) return finish("aborted");
      this.#watchers.add(look);
      abort?.addEventListener("abort", onAbort, { once: true });
      if (until !== null) {
        const check = (): void => {
          if (now() >= until) finish("timeout");
          else alarm.set(until, check);
        };
        alarm.set(until, check);
      }
      look();
    });
  }
}
