// Drives the TypeScript mooncat-checkpoint (the original library) against a store for the
// cross-implementation test: node original.mjs PACKAGE_DIR STORE_URL write|read|stale|reset|gc KEYS_JSON
// Prints one JSON line with what it did and saw.
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const [pkgDir, url, command, keysJson] = process.argv.slice(2);
const { CheckpointClient, LeaseLostError } = await import(pathToFileURL(join(pkgDir, "dist", "index.js")).href);
const keys = JSON.parse(keysJson);
const cp = new CheckpointClient({ url });
const out = {};

if (command === "write") {
  // done/<key>: finished with a result; claimed/<key>: a live lease; expired/<key>: a 1 ms lease.
  out.tokens = { claimed: {}, expired: {} };
  for (const key of keys) {
    const d = await cp.claim("done", key, { ownerRunId: "node" });
    if (d.kind !== "claimed") throw new Error(`done/${key}: ${d.kind}`);
    await cp.done("done", key, { leaseToken: d.leaseToken, result: { by: "node", key } });
    const c = await cp.claim("claimed", key, { ownerRunId: "node", leaseMs: 600000 });
    out.tokens.claimed[key] = c.leaseToken;
    const e = await cp.claim("expired", key, { ownerRunId: "node", leaseMs: 1 });
    out.tokens.expired[key] = e.leaseToken;
  }
  const until = Date.now() + 5;
  while (Date.now() < until) { /* let the 1 ms leases run out before the caller reads */ }
} else if (command === "read") {
  // What the original sees in a store the other side wrote, and what its claims do there.
  out.get = {};
  out.claim = {};
  out.list = {};
  out.staleDone = {};
  for (const ns of ["done", "claimed", "expired"]) {
    out.list[ns] = (await cp.list(ns)).map((r) => r.key).sort();
    out.get[ns] = {};
    out.claim[ns] = {};
    for (const key of keys) {
      const r = await cp.get(ns, key);
      out.get[ns][key] = r && { key: r.key, status: r.status, result: r.result, leaseUntil: r.leaseUntil };
      const c = await cp.claim(ns, key, { ownerRunId: "node", leaseMs: 600000 });
      out.claim[ns][key] = { kind: c.kind, result: c.checkpoint.result, owner: c.checkpoint.ownerRunId };
      if (c.kind === "claimed" && ns === "expired") {
        await cp.done(ns, key, { leaseToken: c.leaseToken, result: { by: "node", key } });
      }
    }
  }
} else if (command === "stale") {
  // done with tokens the other side says are stale: each must be refused.
  const tokens = JSON.parse(process.argv[6]);
  out.refused = 0;
  out.accepted = 0;
  for (const key of keys) {
    try {
      await cp.done("stale", key, { leaseToken: tokens[key], result: "stale" });
      out.accepted++;
    } catch (e) {
      if (!(e instanceof LeaseLostError)) throw e;
      out.refused++;
    }
  }
} else if (command === "reset") {
  // reset every key of namespace "fence" (the original deletes the record file and nothing else)
  out.reset = 0;
  for (const key of keys) if (await cp.reset("fence", key)) out.reset++;
} else if (command === "gc") {
  out.removed = await cp.gc({ olderThan: 0 });
} else {
  throw new Error(`unknown command ${command}`);
}
await cp.close();
console.log(JSON.stringify(out));
