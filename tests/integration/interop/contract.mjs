// One scenario per contract line of the README (claim, touch, done, fail, get, reset, list, gc), run
// by the original TypeScript mooncat-checkpoint against a store: node contract.mjs PACKAGE_DIR STORE_URL
// Prints one JSON line {line: outcome}; tests/integration/test_checkpoint_contract_lines.py runs the
// same scenario against ours and compares. Outcomes are normalized: a record as its key, status,
// owner, result, resultRef and attempts; an error as its class name.
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const [pkgDir, url] = process.argv.slice(2);
const { CheckpointClient } = await import(pathToFileURL(join(pkgDir, "dist", "index.js")).href);
const cp = new CheckpointClient({ url });
const out = {};
const rec = (r) => r && { key: r.key, status: r.status, owner: r.ownerRunId ?? null, result: r.result ?? null,
                         resultRef: r.resultRef ?? null, attempts: r.attempts };
const claim = (c) => ({ kind: c.kind, record: rec(c.checkpoint) });
const err = async (f) => { try { await f(); return "no error"; } catch (e) { return e.constructor.name; } };
const expire = (r) => { while (Date.now() <= r.leaseUntil + 2) { /* a 1 ms lease runs out */ } };
const Z = "0".repeat(32);

const a = await cp.claim("c", "k1", { ownerRunId: "a", leaseMs: 600000 });
out["claim: no record -> claimed"] = claim(a);
out["claim: live lease -> busy"] = claim(await cp.claim("c", "k1", { ownerRunId: "b" }));
const t = await cp.touch("c", "k1", { leaseToken: a.leaseToken, extendMs: 900000 });
out["touch: current token -> renewed record"] = { record: rec(t), extended: t.leaseUntil > a.checkpoint.leaseUntil };
out["touch: other token -> null"] = await cp.touch("c", "k1", { leaseToken: Z });
out["touch: no record -> null"] = await cp.touch("c", "nope", { leaseToken: a.leaseToken });
out["done: other token -> LeaseLostError"] = await err(() => cp.done("c", "k1", { leaseToken: Z }));
out["done: current token -> done"] = rec(await cp.done("c", "k1", { leaseToken: a.leaseToken, result: { n: 1 }, resultRef: "r" }));
out["touch: finished record -> null"] = await cp.touch("c", "k1", { leaseToken: a.leaseToken });
out["done: finished record -> LeaseLostError"] = await err(() => cp.done("c", "k1", { leaseToken: a.leaseToken }));
out["done: no record -> LeaseLostError"] = await err(() => cp.done("c", "nope", { leaseToken: Z }));
out["claim: done -> done with its result"] = claim(await cp.claim("c", "k1", { ownerRunId: "b" }));
const e = await cp.claim("c", "k2", { ownerRunId: "a", leaseMs: 1 });
expire(e.checkpoint);
out["claim: expired lease -> claimed again"] = claim(await cp.claim("c", "k2", { ownerRunId: "b", leaseMs: 600000 }));
out["done: overtaken token -> LeaseLostError"] = await err(() => cp.done("c", "k2", { leaseToken: e.leaseToken }));
out["fail: current token -> failed"] = typeof cp.fail === "function" ? "has fail" : "no fail() in this version";
out["get: record"] = rec(await cp.get("c", "k1"));
out["get: no record -> null"] = await cp.get("c", "nope");
out["list: sorted by key"] = (await cp.list("c")).map(rec).sort((x, y) => (x.key < y.key ? -1 : 1));
out["list: by status"] = (await cp.list("c", { status: "done" })).map((r) => r.key);
const g = await cp.claim("g", "k4", { ownerRunId: "a", leaseMs: 1 });
expire(g.checkpoint);
out["gc: grace longer than the expiry -> 0"] = await cp.gc({ olderThan: 3600000 });
out["gc: expired claims only -> 1"] = await cp.gc({ olderThan: 0 });
out["gc: done and live records stay"] = [await cp.get("g", "k4"), (await cp.list("c")).map((r) => r.key).sort()];
out["reset: record -> true"] = await cp.reset("c", "k1");
out["reset: no record -> false"] = await cp.reset("c", "k1");
out["get: after reset -> null"] = await cp.get("c", "k1");
await cp.close();
console.log(JSON.stringify(out));
