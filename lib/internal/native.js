// @ts-check
"use strict";
// The native module as the package uses it: loaded once per environment (each worker thread
// has its own), with its JavaScript halves attached. Internal: the public API is index.js,
// which re-exports only the public names; `compat/` reads the private ones from here.

const binding = require("../../binding.js");
const helpers = require("./helpers.js");
const { installJournalMethods } = require("./journal-methods.js");
const { installEngineMethods } = require("./engine-methods.js");

binding._setHelpers(helpers);
installJournalMethods(binding);
installEngineMethods(binding);

// The core's error codes, option defaults and bounds, read-only: changing them here would
// change nothing the engine checks or throws.
for (const name of ["ErrorCode", "engineBounds", "fanoutBounds", "fanoutDefaults"]) {
  for (const v of Object.values(binding[name])) if (typeof v === "object") Object.freeze(v);
  Object.freeze(binding[name]);
}

module.exports = binding;
