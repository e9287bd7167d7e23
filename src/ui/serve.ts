/**
 * The dashboards' static files (SPEC section 10): `/` (the mesh), `/node`
 * (this machine), and their one script and one style sheet under `/ui/`.
 * Plain files in this folder (and uPlot's from its package), read once when
 * the module loads; nothing is built. Only the paths listed here are served, so no request path ever
 * reaches the file system.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import type http from 'node:http';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

interface Asset {
  body: Buffer;
  type: string;
  etag: string;
}

const HTML = 'text/html; charset=utf-8';

const JS = 'text/javascript; charset=utf-8';
const CSS = 'text/css; charset=utf-8';

/** URL path → file (in this folder, or a URL of a file elsewhere) and its content type. */
const ROUTES: Record<string, [file: string | URL, type: string]> = {
  '/': ['mesh.html', HTML],
  '/node': ['node.html', HTML],
  '/ui/dashboard.js': ['dashboard.js', JS],
  '/ui/dom.js': ['dom.js', JS],
  '/ui/api.js': ['api.js', JS],
  '/ui/feed.js': ['feed.js', JS],
  '/ui/dashboard.css': ['dashboard.css', CSS],
  '/ui/charts.js': ['charts.js', JS],
  '/ui/charts.css': ['charts.css', CSS],
  '/ui/timeline.js': ['timeline.js', JS],
  '/ui/usage.js': ['usage.js', JS],
  // The charting library, served from the installed package (no CDN: the dashboards work on an offline LAN).
  '/ui/uplot.js': [packageFile('uplot/dist/uPlot.esm.js'), JS],
  '/ui/uplot.css': [packageFile('uplot/dist/uPlot.min.css'), CSS],
};

function packageFile(spec: string): URL {
  return pathToFileURL(createRequire(import.meta.url).resolve(spec));
}

/**
 * The pages load only their own script and style and talk only to this
 * node, so a value that slipped into markup could still run nothing.
 */
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

function load(): Map<string, Asset> {
  const assets = new Map<string, Asset>();
  for (const [path, [file, type]] of Object.entries(ROUTES)) {
    const body = fs.readFileSync(new URL(file, import.meta.url));
    const etag = `"${crypto.createHash('sha256').update(body).digest('base64url').slice(0, 22)}"`;
    assets.set(path, { body, type, etag });
  }
  return assets;
}

const assets = load();

/**
 * Answer a GET or HEAD for a dashboard path and return true; return false
 * (and touch nothing) for any other path. Every answer carries
 * `Cache-Control: no-cache` with an ETag, so a browser revalidates and gets
 * 304 while the file is unchanged.
 */
/** Is this one of the dashboards' paths (for 405 on other methods)? */
export function isUiPath(path: string): boolean {
  return Object.hasOwn(ROUTES, path);
}

export function serveUi(pathname: string, res: http.ServerResponse): boolean {
  const asset = assets.get(pathname);
  if (!asset) return false;
  const headers: http.OutgoingHttpHeaders = {
    'content-type': asset.type,
    'cache-control': 'no-cache',
    etag: asset.etag,
    'x-content-type-options': 'nosniff',
    'referrer-policy': 'no-referrer',
  };
  if (asset.type === HTML) {
    headers['content-security-policy'] = CSP;
    headers['x-frame-options'] = 'DENY';
  }
  const ifNoneMatch = res.req?.headers['if-none-match'];
  if (ifNoneMatch && ifNoneMatch.split(',').some((t) => t.trim() === asset.etag)) {
    res.writeHead(304, headers);
    res.end();
    return true;
  }
  headers['content-length'] = asset.body.length;
  res.writeHead(200, headers);
  res.end(asset.body);
  return true;
}
