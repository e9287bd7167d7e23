/** The event sequence of a streamed text answer (docs/api.md, Streaming), shared by the unit and SDK tests. */
export const TEXT_STREAM_EVENTS = (deltas: number): string[] => [
  'response.created',
  'response.in_progress',
  'response.output_item.added',
  'response.content_part.added',
  ...Array.from({ length: deltas }, () => 'response.output_text.delta'),
  'response.output_text.done',
  'response.content_part.done',
  'response.output_item.done',
  'response.completed',
];
