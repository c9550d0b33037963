// @ts-check
// How a setting given as a string (an environment variable, a flag's value) is read, one rule
// for every host: our server's flags and environment, and the swapped servers' environment.

/**
 * Whether a switch is turned off: "0", "false" or "no" (any case, surrounding spaces
 * ignored). Anything else, and no value at all, leaves the default (on).
 * @param {unknown} value
 */
export function switchedOff(value) {
  if (value === false) return true;
  const v = value == null ? "" : String(value).trim().toLowerCase();
  return v === "0" || v === "false" || v === "no";
}
