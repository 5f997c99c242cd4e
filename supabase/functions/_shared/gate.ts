/**
 * A gate in front of a pool of connections: how much work is handed to the
 * pool at once, so that work which needs a connection with nothing else on
 * it gets one. `db.ts` puts one in front of each postgres.js pool (see
 * `Pools.database` for why).
 *
 * Two kinds of holder: one that needs a connection to itself (`alone`),
 * and one that may follow others on a connection (`shared`). A holder
 * alone is let in only while alone holders and shared ones together are
 * fewer than the connections, so that one connection is free whichever
 * connections the shared ones sit on; shared holders are let in at once.
 * Both wait in one line, first come first in: a shared holder never passes
 * one alone that waits before it, so neither kind starves the other.
 *
 * Written here rather than taken from a library (p-limit, p-queue): those
 * count one kind of task, a waiter here must be withdrawable while it
 * waits (its statement ran out of time, its request was abandoned), and
 * the next waiter must start in the same turn as a place is given back,
 * before any other code can take the connection just freed.
 *
 * @module
 */

/** A holder's place in a {@linkcode Gate}. */
export interface Place {
  /**
   * Withdraws a holder still waiting: `true` when it now never starts,
   * `false` when it has started (then it must {@linkcode Place.leave}).
   */
  withdraw(): boolean;
  /** Gives the place back once its work is done; later calls do nothing. */
  leave(): void;
}

interface _Waiter {
  readonly start: () => void;
  readonly shared: boolean;
}

/** At most `size` connections' worth of work at once; see the module. */
export class Gate {
  readonly #size: number;
  #alone = 0;
  #shared = 0;
  // A Set keeps arrival order and removes a withdrawn waiter in O(1).
  readonly #waiting = new Set<_Waiter>();

  /** A gate in front of `size` connections (1 or more). */
  constructor(size: number) {
    if (!Number.isInteger(size) || size < 1) {
      throw new RangeError("a gate needs at least one connection");
    }
    this.#size = size;
  }

  /**
   * Runs `start` now if the holder may go in, else when it may (in the
   * same turn as the place that lets it in is given back).
   *
   * @example
   * ```ts
   * const gate = new Gate(1);
   * const first = gate.enter(() => console.log("first"), { shared: false }); // runs now
   * const second = gate.enter(() => console.log("second"), { shared: false }); // waits
   * second.withdraw(); // true: "second" never runs
   * first.leave();
   * ```
   */
  enter(start: () => void, kind: { shared: boolean }): Place {
    let state: "waiting" | "in" | "out" = "waiting";
    const waiter: _Waiter = {
      shared: kind.shared,
      start: () => {
        state = "in";
        start();
      },
    };
    this.#waiting.add(waiter);
    this.#admit();
    return {
      withdraw: () => {
        if (state !== "waiting") return false;
        state = "out";
        this.#waiting.delete(waiter);
        // It may have held back those behind it.
        this.#admit();
        return true;
      },
      leave: () => {
        if (state !== "in") return;
        state = "out";
        if (waiter.shared) this.#shared--;
        else this.#alone--;
        this.#admit();
      },
    };
  }

  /** How many holders wait to go in. */
  get waiting(): number {
    return this.#waiting.size;
  }

  // Lets in, in arrival order, every waiter that may go in now.
  #admit(): void {
    for (const next of this.#waiting) {
      if (!next.shared && this.#alone + this.#shared >= this.#size) return;
      this.#waiting.delete(next);
      if (next.shared) this.#shared++;
      else this.#alone++;
      next.start();
    }
  }
}
