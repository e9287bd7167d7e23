/**
 * Just enough multipart/form-data to read the small text fields of an audio
 * upload (`model`) and to rewrite `model` when an alias resolved. The file
 * part's bytes are never touched.
 */

export function boundaryOf(contentType: string | undefined): string | undefined {
  const m = /boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(contentType ?? '');
  return m ? (m[1] ?? m[2]) : undefined;
}

interface Part {
  name: string | undefined;
  filename: string | undefined;
  /** Offsets of the part's content within the body. */
  start: number;
  end: number;
}

export function parts(body: Buffer, boundary: string): Part[] {
  const delim = Buffer.from(`--${boundary}`);
  const out: Part[] = [];
  let pos = body.indexOf(delim);
  while (pos >= 0) {
    let headStart = pos + delim.length;
    if (body[headStart] === 0x2d && body[headStart + 1] === 0x2d) break; // closing delimiter
    if (body[headStart] === 0x0d && body[headStart + 1] === 0x0a) headStart += 2;
    const headEnd = body.indexOf('\r\n\r\n', headStart);
    if (headEnd < 0) break;
    const head = body.subarray(headStart, headEnd).toString('utf8');
    const next = body.indexOf(Buffer.from(`\r\n--${boundary}`), headEnd + 4);
    if (next < 0) break;
    const disp = /content-disposition:[^\r\n]*/i.exec(head)?.[0] ?? '';
    out.push({
      name: /\bname="([^"]*)"/i.exec(disp)?.[1],
      filename: /\bfilename="([^"]*)"/i.exec(disp)?.[1],
      start: headEnd + 4,
      end: next,
    });
    pos = next + 2;
  }
  return out;
}

/** How many text fields of this name the body has (an upload naming `model` twice is ambiguous: engines differ in which they read). */
export function textFieldCount(body: Buffer, boundary: string, name: string): number {
  return parts(body, boundary).filter((x) => x.name === name && x.filename === undefined).length;
}

/** The value of a text field, or undefined. */
export function textField(body: Buffer, boundary: string, name: string): string | undefined {
  const p = parts(body, boundary).find((x) => x.name === name && x.filename === undefined);
  return p ? body.subarray(p.start, p.end).toString('utf8') : undefined;
}

/** A copy of the body with one text field's value replaced; the other parts byte for byte. */
export function replaceTextField(body: Buffer, boundary: string, name: string, value: string): Buffer {
  const p = parts(body, boundary).find((x) => x.name === name && x.filename === undefined);
  if (!p) return body;
  return Buffer.concat([body.subarray(0, p.start), Buffer.from(value, 'utf8'), body.subarray(p.end)]);
}
