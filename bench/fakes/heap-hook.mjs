// Bench-only preload (node --import=<this file>, with VW_HEAP_DIR set): a V8
// sampling heap profile of everything the process allocates, collected or
// not (so it shows where the bytes per request come from, not only what is
// still alive), written to $VW_HEAP_DIR/<pid>.heapprofile when the process
// exits. Nothing in src/ knows of it.
import fs from 'node:fs';
import inspector from 'node:inspector';
import path from 'node:path';

const dir = process.env.VW_HEAP_DIR;
if (dir) {
  const file = path.join(dir, `${process.pid}.heapprofile`);
  fs.mkdirSync(dir, { recursive: true });
  const session = new inspector.Session();
  session.connect();
  session.post('HeapProfiler.startSampling', { samplingInterval: 1024, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true });
  // The in-thread session answers synchronously, so the profile is written even from the exit event.
  process.on('exit', () => {
    session.post('HeapProfiler.stopSampling', (err, r) => {
      if (!err) fs.writeFileSync(file, JSON.stringify(r.profile));
    });
  });
}
