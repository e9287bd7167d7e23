// What a build of src/ is a build of: every file's path, size and mtime.
// dist/ is run only while its stamp equals the sources' (bin/viiwork.js),
// so an edited, added or removed source sends the CLI back to tsx.
// Stat-only: about 2 ms for the whole tree.
import fs from 'node:fs';
import path from 'node:path';

export const STAMP = '.stamp';

export function sourceStamp(src) {
  const files = [];
  const walk = (dir, rel) => {
    for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
      const r = rel ? `${rel}/${e.name}` : e.name;
      if (e.isDirectory()) walk(path.join(dir, e.name), r);
      else if (e.isFile()) files.push(r);
    }
  };
  walk(src, '');
  files.sort();
  const lines = files.map((r) => {
    const s = fs.statSync(path.join(src, r));
    return `${r} ${s.size} ${s.mtimeMs}`;
  });
  return { files, text: lines.join('\n') + '\n' };
}
