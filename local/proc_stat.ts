/**
 * The fields of a Linux `/proc/<pid>/stat` line the project reads: the
 * parent's pid and the CPU time used (`utime` + `stime`, in clock ticks,
 * USER_HZ = 100). The command name in parentheses may hold spaces and
 * parentheses itself, so the fields are counted from the last `)`.
 *
 * @module
 */

/** A process's parent and CPU ticks, from its `/proc/<pid>/stat` text. */
export interface ProcStat {
  readonly ppid: string;
  readonly ticks: number;
}

/**
 * Parses a `/proc/<pid>/stat` line.
 *
 * @example
 * ```ts
 * parseProcStat(Deno.readTextFileSync("/proc/self/stat")).ticks;
 * ```
 */
export function parseProcStat(stat: string): ProcStat {
  const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return { ppid: rest[1], ticks: Number(rest[11]) + Number(rest[12]) };
}
