/**
 * A gate in front of a pool of connections: at most one holder per
 * connection at once, the others waiting in arrival order. `db.ts` puts
 * one in front of each pool whose statements must each have a connection
 * to themselves (see `Pools.database` for why).
 *
 * Written here rather than taken from a library (p-limit, p-queue): a
 * waiter must be withdrawable while it waits (its statement ran out of
 * time, its request was abandoned), and the next waiter must start in the
 * same turn as a place is given back, before any other code can take the
 * connection just freed.
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
  /**
   * Until this place is given back, no other holder starts, whatever is
   * free: for a holder whose connection is in a state where postgres.js
   * would write the next statement behind its own (see `db.ts`). Does
   * nothing for a place not in.
   */
  hold(): void;
}

/** At most `size` holders at once; the others wait, first come first in. */
export class Gate {
  #free: number;
  // Places in that hold the gate shut (see `Place.hold`).
  #held = 0;
  // A Set keeps arrival order and removes a withdrawn waiter in O(1).
  readonly #waiting = new Set<() => void>();

  /** A gate in front of `size` connections (1 or more). */
  constructor(size: number) {
    if (!Number.isInteger(size) || size < 1) {
      throw new RangeError("a gate needs at least one connection");
    }
    this.#free = size;
  }

  /**
   * Runs `start` now if a place is free, else when one is given back (in
   * the same turn, before any other code).
   *
   * @example
   * ```ts
   * const gate = new Gate(1);
   * const first = gate.enter(() => console.log("first")); // runs now
   * const second = gate.enter(() => console.log("second")); // waits
   * second.withdraw(); // true: "second" never runs
   * first.leave();
   * ```
   */
  enter(start: () => void): Place {
    let state: "waiting" | "in" | "out" = "waiting";
    let holding = false;
    const go = () => {
      state = "in";
      start();
    };
    this.#waiting.add(go);
    this.#admit();
    return {
      withdraw: () => {
        if (state !== "waiting") return false;
        state = "out";
        this.#waiting.delete(go);
        return true;
      },
      leave: () => {
        if (state !== "in") return;
        state = "out";
        if (holding) this.#held--;
        this.#free++;
        this.#admit();
      },
      hold: () => {
        if (state !== "in" || holding) return;
        holding = true;
        this.#held++;
      },
    };
  }

  // Starts waiters, first come first in, while places are free and no
  // place holds the gate. A start may give its place back (or hold) at
  // once: each turn of the loop reads the counts afresh.
  #admit(): void {
    while (this.#free > 0 && this.#held === 0 && this.#waiting.size > 0) {
      const [next] = this.#waiting;
      this.#waiting.delete(next);
      this.#free--;
      next();
    }
  }

  /** How many holders wait for a place. */
  get waiting(): number {
    return this.#waiting.size;
  }
}
