// @ts-check
"use strict";
// durable-touch: the public API (typed in index.d.ts). The native module is loaded by
// lib/internal/native.js (through binding.js, the loader `napi build` generates), which also
// attaches its JavaScript halves; only the public names are re-exported here, so the private
// entry points the package uses internally (`_waitForAny`, `_touch`, `_sqlFunctions`, …) are
// not part of it.

const native = require("./lib/internal/native.js");

module.exports.Store = native.Store;
module.exports.TouchEngine = native.TouchEngine;
module.exports.EngineJournal = native.EngineJournal;
module.exports.TouchJournal = native.TouchJournal;
module.exports.WaitListener = native.WaitListener;
module.exports.ErrorCode = native.ErrorCode;
module.exports.engineBounds = native.engineBounds;
module.exports.fanoutBounds = native.fanoutBounds;
module.exports.fanoutDefaults = native.fanoutDefaults;
module.exports.formatTouchCursor = native.formatTouchCursor;
module.exports.parseTouchCursor = native.parseTouchCursor;
module.exports.processorThreads = native.processorThreads;
module.exports.processRows = native.processRows;
module.exports.validateStateProtocolProfile = native.validateStateProtocolProfile;
module.exports.validateTouchConfig = native.validateTouchConfig;
module.exports.keys = native.keys;
