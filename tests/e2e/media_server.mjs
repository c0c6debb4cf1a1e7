// A stand-in image host on 127.0.0.1 for tests/e2e/media.sh: usage
// node media_server.mjs PORTFILE PNGFILE. Routes:
//   /img.png            the PNG (image/png)
//   /redirect?to=URL    302 to URL;  /loop  302 to itself
//   /big  /big-chunked  3 MiB of image/png, with and without Content-Length
//   /slow               answers after 5 s
//   /html               text/html;   /missing  404
import { createServer } from 'node:http';
import { readFileSync, writeFileSync } from 'node:fs';

const [portFile, pngFile] = process.argv.slice(2);
const png = readFileSync(pngFile);
const big = Buffer.alloc(3 << 20, 7);

const server = createServer((req, res) => {
  const url = new URL(req.url, 'http://x');
  switch (url.pathname) {
    case '/img.png':
      res.writeHead(200, { 'Content-Type': 'image/png', 'Content-Length': png.length });
      return res.end(png);
    case '/redirect':
      res.writeHead(302, { Location: url.searchParams.get('to') });
      return res.end();
    case '/loop':
      res.writeHead(302, { Location: '/loop' });
      return res.end();
    case '/big':
      res.writeHead(200, { 'Content-Type': 'image/png', 'Content-Length': big.length });
      return res.end(big);
    case '/big-chunked': {
      res.writeHead(200, { 'Content-Type': 'image/png' });
      let sent = 0;
      const more = () => {
        while (sent < big.length) {
          const part = big.subarray(sent, sent + 65536);
          sent += part.length;
          if (!res.write(part)) return res.once('drain', more);
        }
        res.end();
      };
      return more();
    }
    case '/slow': {
      const t = setTimeout(() => {
        res.writeHead(200, { 'Content-Type': 'image/png' });
        res.end(png);
      }, 5000);
      req.socket.on('close', () => clearTimeout(t));
      return;
    }
    case '/html':
      res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' });
      return res.end('<html></html>');
    default:
      res.writeHead(404, { 'Content-Type': 'text/plain' });
      return res.end('not found');
  }
});
server.listen(0, '127.0.0.1', () => writeFileSync(portFile, `${server.address().port}\n`));
