/**
 * The body an engine or a member gets: the client's bytes, with only the
 * fields the node must set spliced in (SPEC section 4): `model` when an
 * alias resolved, and `stream_options.include_usage` when the node asks a
 * generation stream for usage. Nothing else is re-serialised.
 */
import { lastSpan, scanJsonObject, setMemberEdits, spliceAsync, valueOf, type Edit } from '../../http/json-scan.ts';
import { boundaryOf, replaceTextField } from '../../http/multipart.ts';
import { GENERATION_WORKLOADS } from '../../workloads/workloads.ts';
import type { RoutedRequest } from '../types.ts';

/** A `stream_options` larger than this is left as the client sent it (the node then learns no usage from that stream). */
const STREAM_OPTIONS_MAX = 4096;

function modelEdits(req: RoutedRequest): Edit[] {
  if (req.alias === undefined || !req.scan) return [];
  return setMemberEdits(req.scan, 'model', JSON.stringify(req.model));
}

/** The body for a member: the resolved model spliced in; the executor adds what its engine needs. */
export async function forwardBody(req: RoutedRequest): Promise<Buffer> {
  if (req.alias !== undefined && !req.scan) return multipartModel(req);
  return spliceAsync(req.body, modelEdits(req));
}

/** Does this request get usage asked for on the node's behalf? */
export function asksUsage(req: RoutedRequest): boolean {
  // The Responses and Messages APIs have no stream_options: their translations ask for usage themselves.
  return req.stream && req.scan !== undefined && GENERATION_WORKLOADS.includes(req.workload) && !req.clientWantsUsage && (req.endpoint.dialect === 'chat' || req.endpoint.dialect === 'completions');
}

/**
 * The body for a local engine, and whether the usage chunk must be removed
 * from the stream. `idSlot`: the llama-server slot the node chose for it
 * (engines/cache-book.ts), set as `id_slot` like `model`.
 */
export async function engineBody(req: RoutedRequest, idSlot?: number): Promise<{ body: Buffer; stripUsage: boolean }> {
  if (!req.scan) return { body: req.alias !== undefined ? multipartModel(req) : req.body, stripUsage: false };
  const edits = modelEdits(req);
  if (idSlot !== undefined) edits.push(...setMemberEdits(req.scan, 'id_slot', String(idSlot)));
  if (!asksUsage(req)) return { body: await spliceAsync(req.body, edits), stripUsage: false };
  const usage = usageEdits(req.body, req.scan);
  if (!usage) return { body: await spliceAsync(req.body, edits), stripUsage: false };
  return { body: await spliceAsync(req.body, [...edits, ...usage]), stripUsage: true };
}

function usageEdits(body: Buffer, scan: NonNullable<RoutedRequest['scan']>): Edit[] | undefined {
  const span = lastSpan(scan, 'stream_options');
  if (!span) return setMemberEdits(scan, 'stream_options', '{"include_usage":true}');
  if (span.end - span.start > STREAM_OPTIONS_MAX) return undefined;
  const inner = body.subarray(span.start, span.end);
  const scanned = scanJsonObject(inner);
  // `null` or anything that is not an object: replace it with the one field we need.
  if (!scanned.ok) return [{ span, text: '{"include_usage":true}' }];
  // Set include_usage inside the client's object; every other option keeps its bytes.
  return setMemberEdits(scanned.object, 'include_usage', 'true').map((e) => ({
    span: { start: span.start + e.span.start, end: span.start + e.span.end },
    text: e.text,
  }));
}

/** Does the client's own `stream_options` ask for usage? */
export function clientWantsUsage(body: Buffer, scan: NonNullable<RoutedRequest['scan']>): boolean {
  const span = lastSpan(scan, 'stream_options');
  if (!span || span.end - span.start > STREAM_OPTIONS_MAX) return false;
  const v = valueOf(body, span) as { include_usage?: unknown } | null;
  return typeof v === 'object' && v !== null && v.include_usage === true;
}

/** For uploads only the `model` field changes; the file part stays byte for byte. */
function multipartModel(req: RoutedRequest): Buffer {
  const boundary = boundaryOf(req.contentType);
  return boundary ? replaceTextField(req.body, boundary, 'model', req.model) : req.body;
}
