/**
 * Waiting for a claim's status to change: the driver wakes its watchers
 * whenever anything happens, and each waiter looks again.
 *
 * @module
 */
import { Alarm, now } from "./clock.js";
/** Something with a status (checked against the clock) and watchers. */
export class Watched {
    #watchers = new Set();
    /** Wakes every waiter. */
    notify() {
        for (const watcher of [...this.#watchers])
            watcher();
    }
    /**
     * Waits until `ready(status)`, the loss, `until` (an instant; null: no
     * bound) or `abort`, whichever comes first.
     */
    waitUntil(ready, until, abort) {
        return new Promise((resolve) => {
            const alarm = new Alarm();
            let done = false;
            const finish = (end) => {
                if (done)
                    return;
                done = true;
                this.#watchers.delete(look);
                alarm.cancel();
                abort?.removeEventListener("abort", onAbort);
                resolve(end);
            };
            const look = () => {
                const status = this.status();
                if (ready(status))
                    finish("ready");
                else if (status === "lost")
                    finish("lost");
            };
            const onAbort = () => finish("aborted");
            if (abort?.aborted)
                return finish("aborted");
            this.#watchers.add(look);
            abort?.addEventListener("abort", onAbort, { once: true });
            if (until !== null) {
                const check = () => {
                    if (now() >= until)
                        finish("timeout");
                    else
                        alarm.set(until, check);
                };
                alarm.set(until, check);
            }
            look();
        });
    }
}
//# sourceMappingURL=watch.js.map