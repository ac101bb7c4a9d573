// tests/peers/strata-daemon.mjs: starts a `strata serve` daemon for the Node
// peers (sched-load, sdk-conformance).
//
//   import {startDaemon} from "./strata-daemon.mjs";
//   const d = await startDaemon(strata, modelPath, ["--parallel", "2"], spawned);
//   fetch(`http://127.0.0.1:${d.port}/health`); d.log(); d.p.kill("SIGTERM");
//
// The daemon listens on a free port (--port 0) with one thread; the promise
// resolves once /health answers 200 (after the warm-up step) and rejects if
// the daemon exits first or is not ready within 60 s. The child process is
// pushed onto `spawned` (optional) as soon as it exists, so a caller can kill
// it even when the start fails.
import {spawn} from "node:child_process";

export function startDaemon(strata, modelPath, args, spawned = []) {
  return new Promise((resolve, reject) => {
    const p = spawn(strata, ["serve", modelPath, "--port", "0", "--threads", "1", ...args],
      { stdio: ["ignore", "ignore", "pipe"] });
    spawned.push(p);
    let log = "";
    const timer = setTimeout(() => reject(new Error(`daemon did not start: ${log}`)), 60000);
    p.stderr.on("data", (d) => {
      log += d.toString();
      const m = log.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m && /loaded/.test(log) && !p.polling) {
        // "loaded" precedes the warm-up step; the daemon is ready when /health says 200.
        p.polling = true;
        const port = Number(m[1]);
        const poll = async () => {
          const r = await fetch(`http://127.0.0.1:${port}/health`).catch(() => null);
          if (r && r.status === 200) { clearTimeout(timer); resolve({ p, port, log: () => log }); }
          else setTimeout(poll, 20);
        };
        poll();
      }
    });
    p.on("exit", (c) => { clearTimeout(timer); reject(new Error(`daemon exited ${c}: ${log}`)); });
  });
}
