// Starts `noetic serve` as a real process for an end-to-end test and stops it after.
//
//   const server = await startServe(['serve', 'flow.json', '--needs-approval', 'echo']);
//   ... fetch(`${server.url}v1/health`) ...
//   await server.stop();          // SIGTERM, then waits for the exit (bounded)
//
// The binary is $NOETIC_BIN (set by `cargo xtask e2e`). It listens on 127.0.0.1:0 unless the
// arguments say otherwise; the URL is read from its "listening on http://ADDR/" line on stderr.
import { spawn } from 'node:child_process';

const START_TIMEOUT_MS = 30_000;
const STOP_TIMEOUT_MS = 15_000;

export async function startServe(args, { env = {}, cwd } = {}) {
  const bin = process.env.NOETIC_BIN;
  if (!bin) throw new Error('NOETIC_BIN is not set: run the e2e tests with `cargo xtask e2e`');
  const withListen = args.includes('--listen') ? args : [...args, '--listen', '127.0.0.1:0'];
  const child = spawn(bin, withListen, {
    cwd,
    env: { ...process.env, OPENROUTER_API_KEY: '', OPENAI_API_KEY: '', ANTHROPIC_API_KEY: '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const stderr = [];
  let exited = null;
  const exit = new Promise((resolve) => child.on('exit', (code, signal) => { exited = { code, signal }; resolve(exited); }));
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`noetic serve did not start in time:\n${stderr.join('')}`)), START_TIMEOUT_MS);
    let buffered = '';
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (chunk) => {
      stderr.push(chunk);
      buffered += chunk;
      const found = buffered.match(/listening on (http:\/\/[^\s]+\/)/);
      if (found) { clearTimeout(timer); resolve(found[1]); }
    });
    exit.then(() => { clearTimeout(timer); reject(new Error(`noetic serve exited ${JSON.stringify(exited)}:\n${stderr.join('')}`)); });
  });
  return {
    url,
    child,
    stderr: () => stderr.join(''),
    async stop() {
      if (exited) return exited;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), STOP_TIMEOUT_MS);
      const result = await exit;
      clearTimeout(timer);
      return result;
    },
  };
}
