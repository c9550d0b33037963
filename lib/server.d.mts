import type { Store, TouchEngine } from "../index.js";

export interface ServerOptions {
  /** Directory of the SQLite file (default $DATA_DIR or ./data). */
  dataDir?: string;
  /** Port (default $PORT or 8787; 0 picks a free one). */
  port?: number | string;
  /** Host (default $HOST or 127.0.0.1). */
  host?: string;
  /** Touch workers (default $TOUCH_WORKERS or the engine's default). */
  workers?: number | string;
  /** Largest request body in bytes (default 10 MiB). */
  bodyLimit?: number;
}

export interface RunningServer {
  url: string;
  port: number;
  store: Store;
  engine: TouchEngine;
  /** Answers pending waits (touched: false), stops listening and closes the store. */
  close(): Promise<void>;
}

export function startServer(options?: ServerOptions): Promise<RunningServer>;

export interface Handler {
  fetch(request: Request): Promise<Response>;
}

export function createHandler(options: { store: Store; engine: TouchEngine; bodyLimit?: number }): Handler;
