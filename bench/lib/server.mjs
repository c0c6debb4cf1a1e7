// Shared by the node benches that run `hearth serve` themselves
// (agent.mjs).
import { spawn } from 'node:child_process';
import http from 'node:http';

// `BIN serve --port 0 ARGS...`, once it listens: { p, base }
export async function start(bin, args) {
  const p = spawn(bin, ['serve', '--port', '0', ...args]);
  let err = '';
  const port = await new Promise((res, rej) => {
    p.stderr.on('data', (d) => {
      err += d;
      const m = err.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) res(Number(m[1]));
    });
    p.on('exit', () => rej(new Error(err)));
  });
  return { p, base: `http://127.0.0.1:${port}` };
}

export const stop = (s) => new Promise((res) => { s.p.on('exit', res); s.p.kill('SIGTERM'); });

// POST a JSON body, the response's text to onData as it streams. Plain
// http: node's fetch gives up on a body silent for 5 minutes, as a long
// prefill is.
export function post(url, body, onData) {
  return new Promise((res, rej) => {
    const u = new URL(url);
    const req = http.request({ hostname: u.hostname, port: u.port, path: u.pathname,
      method: 'POST', headers: { 'Content-Type': 'application/json' } }, (resp) => {
      resp.setEncoding('utf8');
      resp.on('data', onData);
      resp.on('end', res);
      resp.on('error', rej);
    });
    req.on('error', rej);
    req.end(JSON.stringify(body));
  });
}
