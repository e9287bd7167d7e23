/**
 * llama-server's version, in either of its formats (SPEC section 3):
 *
 * - `--version`: `version: 4748 (c392e50)` (builds up to early 2025) or
 *   `version: 0.5.0-dev (build 1, commit de3ff81)` (today's);
 * - `/props` `build_info`: `b4748-c392e50`, `b1-de3ff81`.
 *
 * The build number is `git rev-list --count HEAD` at configure time
 * (llama.cpp's cmake/build-info.cmake): a real count on a clone of
 * llama.cpp, but 1 on a squashed source (node-llama-cpp's bundle, the engine
 * `npm run engine` builds), 0 without git, and "unknown" in some packages.
 * So a build number ≤ 1 says nothing about age: it is reported as unknown
 * (`build: undefined`), never as the oldest build there is.
 */

export interface EngineVersion {
  /** The semantic version today's builds print ("0.5.0-dev"); undefined in the old format. */
  version?: string;
  /** The git commit count, only when it means something (> 1); undefined for a squashed or unknown build. */
  build?: number;
  /** The number as printed, even when it means nothing (1, 0), for log lines. */
  rawBuild?: number;
  /** The short commit hash. */
  commit?: string;
}

/** The smallest build number taken for a real commit count: 0 is "no git", 1 a squashed source. */
export const MIN_MEANINGFUL_BUILD = 2;

function withBuild(v: EngineVersion, raw: number | undefined): EngineVersion {
  if (raw === undefined || !Number.isFinite(raw)) return v;
  return { ...v, rawBuild: raw, ...(raw >= MIN_MEANINGFUL_BUILD ? { build: raw } : {}) };
}

/** `build_info` from /props ("b4748-c392e50", "b1-de3ff81", "unknown"); undefined when it is not llama.cpp's form. */
export function parseBuildInfo(buildInfo: string | undefined): EngineVersion | undefined {
  const m = /^b(\d+)(?:-([0-9a-f]+))?\b/i.exec(buildInfo?.trim() ?? '');
  if (!m) return undefined;
  return withBuild(m[2] ? { commit: m[2] } : {}, Number(m[1]));
}

/** The output of `llama-server --version`, in either format; undefined when neither is found. */
export function parseVersionOutput(text: string): EngineVersion | undefined {
  // Today's: "version: 0.5.0-dev (build 1, commit de3ff81)".
  const now = /version:\s*(\d+\.\d+[^\s(]*)\s*\(build\s+(\d+|unknown),\s*commit\s+([0-9a-z]+)\)/i.exec(text);
  if (now) return withBuild({ version: now[1], commit: now[3] }, now[2] === 'unknown' ? undefined : Number(now[2]));
  // Up to early 2025: "version: 4748 (c392e50)".
  const old = /version:\s*(\d+)\s*\(([0-9a-f]+)\)/i.exec(text);
  if (old) return withBuild({ commit: old[2] }, Number(old[1]));
  return undefined;
}

/** For a log line or `viiwork init`: "build b4748-c392e50", "version 0.5.0-dev, commit de3ff81". */
export function describeVersion(v: EngineVersion): string {
  if (v.version) return [`version ${v.version}`, v.build !== undefined ? `build ${v.build}` : '', v.commit ? `commit ${v.commit}` : ''].filter(Boolean).join(', ');
  if (v.build !== undefined) return `build b${v.build}${v.commit ? `-${v.commit}` : ''}`;
  return v.commit ? `build of unknown number, commit ${v.commit}` : 'unknown build';
}
