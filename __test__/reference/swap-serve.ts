// A copy of the reference server (its src/ at $APP_SRC, swapped or not) as its own process on
// $DATA_DIR: prints `{"port":<n>}` and a newline once it listens, then serves until killed.
import { startServer } from "./swap-server.ts";

const srv = await startServer(process.env.DATA_DIR!);
process.stdout.write(JSON.stringify({ port: srv.port }) + "\n");
