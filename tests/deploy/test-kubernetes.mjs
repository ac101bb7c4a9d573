// tests/deploy/test-kubernetes.mjs: deploy/kubernetes/ against the
// Kubernetes API schemas (kubernetes-models, no cluster here) and against
// strata itself.
//
//   node test-kubernetes.mjs <strata binary> <repo root>
//
// 1. Every manifest is an object the API server takes: kubernetes-models'
//    JSON-schema validation (types, formats, required fields), plus the
//    strict field check `kubectl apply --validate=strict` does (a field the
//    API does not know, e.g. a misspelt `readinesProbe`, is refused): the
//    field names come from the package's type declarations.
// 2. The pieces agree: Service -> pod labels and the named port, probes on
//    /health at STRATA_PORT, Guaranteed QoS (requests = limits, whole CPUs,
//    one GPU), grace period > preStop pause + STRATA_SHUTDOWN_TIMEOUT, the
//    image's user and entrypoint (Dockerfile), the models volume under
//    STRATA_MODEL, the kustomization listing every file.
// 3. strata takes the ConfigMap as it is (every key a STRATA_* option, every
//    value valid: `strata serve --print-config` with that environment), and
//    sizes itself from the pod's limits: on a cgroup tree that has the
//    Deployment's cpu and memory limits (--sys-root), --print-config reports
//    that quota and a memory budget equal to the memory limit.
// 4. The checks can fail: mutated manifests (an unknown field, requests !=
//    limits, a probe on another port, a short grace period) are refused.
// Prints `RESULT kubernetes: N passed, M failed`; exits 1 on any failure.
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { parseAllDocuments } from "yaml";
import { ConfigMap, Service } from "kubernetes-models/v1";
import { Deployment } from "kubernetes-models/apps/v1";

const [strata, root] = process.argv.slice(2);
const dir = join(root, "deploy/kubernetes");
let passed = 0, failed = 0;
function check(name, ok, detail = "") {
  if (ok) passed++;
  else { failed++; console.log(`FAIL ${name} ${detail}`); }
}

// ---- strict fields, from kubernetes-models' .d.ts declarations ----------
// Each model's declaration names its properties ("name"?: Type;) and
// imports the interfaces of nested objects from sibling files.
const require = createRequire(import.meta.url);
const pkgRoot = dirname(require.resolve("kubernetes-models/package.json"));
const declCache = new Map();
function declaration(file) {
  if (declCache.has(file)) return declCache.get(file);
  const text = readFileSync(file, "utf8");
  const imports = {};
  for (const m of text.matchAll(/import \{ ([^}]+) \} from "([^"]+)";/g))
    for (const name of m[1].split(",").map((x) => x.trim()))
      imports[name] = m[2];
  const interfaces = {};
  for (const m of text.matchAll(/export interface (\w+)(?: extends [\w, ]+)? \{([\s\S]*?)\n\}/g)) {
    const props = {};
    for (const p of m[2].matchAll(/^ {4}"([^"]+)"\??: (.+?);?$/gm)) props[p[1]] = p[2];
    interfaces[m[1]] = props;
  }
  // export type { IDeploymentSpec as IIoK8sApiAppsV1DeploymentSpec, ... }
  for (const m of text.matchAll(/export type \{([^}]+)\}/g))
    for (const part of m[1].split(",")) {
      const [name, alias] = part.trim().split(/\s+as\s+/);
      if (alias && interfaces[name]) interfaces[alias] = interfaces[name];
    }
  const d = { file, imports, interfaces };
  declCache.set(file, d);
  return d;
}
const nodeModules = dirname(pkgRoot);
function resolveImport(fromFile, spec) {
  const base = spec.startsWith(".") ? join(dirname(fromFile), spec) : join(nodeModules, spec);
  return base.replace(/\.js$/, "") + ".d.ts";
}
// The interface `name` declared in file or imported by it: {decl, props}.
function lookup(file, name) {
  const d = declaration(file);
  if (d.interfaces[name]) return { file, props: d.interfaces[name] };
  if (d.imports[name]) return lookup(resolveImport(file, d.imports[name]), name);
  return null;
}
// Unknown field names in obj, checked against interface `name` of file.
function unknownFields(obj, file, name, path, out) {
  const it = lookup(file, name);
  if (!it || obj === null || typeof obj !== "object") return out;
  const typeMetaKeys = ["apiVersion", "kind"];
  for (const [k, v] of Object.entries(obj)) {
    const t = it.props[k];
    if (t === undefined) {
      if (!typeMetaKeys.includes(k)) out.push(`${path}.${k}`);
      continue;
    }
    const arr = t.match(/^Array<(I\w+)>$/);
    const one = t.match(/^(I\w+)$/);
    if (arr && Array.isArray(v)) v.forEach((x, i) => unknownFields(x, it.file, arr[1], `${path}.${k}[${i}]`, out));
    else if (one) unknownFields(v, it.file, one[1], `${path}.${k}`, out);
  }
  return out;
}
const kinds = {
  ConfigMap: { cls: ConfigMap, decl: join(pkgRoot, "v1/ConfigMap.d.ts"), iface: "IConfigMap" },
  Service: { cls: Service, decl: join(pkgRoot, "v1/Service.d.ts"), iface: "IService" },
  Deployment: { cls: Deployment, decl: join(pkgRoot, "apps/v1/Deployment.d.ts"), iface: "IDeployment" },
};
// Errors of one manifest: schema validation, then strict fields.
function manifestErrors(obj) {
  const k = kinds[obj?.kind];
  if (!k) return [`unexpected kind ${obj?.kind}`];
  const errs = [];
  try {
    new k.cls(obj).validate();
  } catch (e) {
    errs.push(String(e.message).slice(0, 400));
  }
  for (const f of unknownFields(obj, k.decl, k.iface, obj.kind, [])) errs.push(`unknown field ${f}`);
  return errs;
}

// ---- quantities ------------------------------------------------------------
function bytesOf(q) {
  const m = String(q).match(/^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$/);
  if (!m) return NaN;
  const mult = { Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3, Ti: 1024 ** 4, k: 1e3, M: 1e6, G: 1e9, T: 1e12 };
  return Number(m[1]) * (m[2] ? mult[m[2]] : 1);
}

// ---- the cross-checks ------------------------------------------------------
// Returns a list of problems (empty: consistent).
function consistency(m, dockerfile) {
  const bad = [];
  const cm = m.ConfigMap, svc = m.Service, dep = m.Deployment;
  const env = cm.data || {};
  const pod = dep.spec.template;
  const c = pod.spec.containers.find((x) => x.name === "strata");
  if (!c) return ["no container named strata"];
  const labels = pod.metadata.labels || {};
  for (const [k, v] of Object.entries(dep.spec.selector.matchLabels || {}))
    if (labels[k] !== v) bad.push(`deployment selector ${k}=${v} not on the pod`);
  for (const [k, v] of Object.entries(svc.spec.selector || {}))
    if (labels[k] !== v) bad.push(`service selector ${k}=${v} not on the pod`);
  const port = Number(env.STRATA_PORT || 8080);
  const named = Object.fromEntries((c.ports || []).map((p) => [p.name, p.containerPort]));
  const portOf = (p) => (typeof p === "string" ? named[p] : p);
  if (!c.ports?.some((p) => p.containerPort === port)) bad.push(`no containerPort ${port}`);
  for (const sp of svc.spec.ports) if (portOf(sp.targetPort) !== port) bad.push(`service targetPort ${sp.targetPort} is not ${port}`);
  if (env.STRATA_HOST !== "0.0.0.0" && env.STRATA_HOST !== "::") bad.push("STRATA_HOST must listen on all addresses");
  for (const probe of ["startupProbe", "readinessProbe", "livenessProbe"]) {
    const p = c[probe];
    if (!p?.httpGet) { bad.push(`${probe} missing or not httpGet`); continue; }
    if (p.httpGet.path !== "/health") bad.push(`${probe} path ${p.httpGet.path}`);
    if (portOf(p.httpGet.port) !== port) bad.push(`${probe} port ${p.httpGet.port} is not ${port}`);
  }
  const st = c.startupProbe;
  if (st && (st.periodSeconds ?? 10) * (st.failureThreshold ?? 3) < 600)
    bad.push("startupProbe allows less than 10 minutes for a large model to load");
  const req = c.resources?.requests || {}, lim = c.resources?.limits || {};
  for (const r of ["cpu", "memory", "nvidia.com/gpu"]) {
    if (lim[r] === undefined) bad.push(`no ${r} limit`);
    else if (String(req[r]) !== String(lim[r])) bad.push(`${r} request ${req[r]} != limit ${lim[r]} (not Guaranteed)`);
  }
  if (!/^\d+$/.test(String(lim.cpu)) || Number(lim.cpu) < 2) bad.push(`cpu limit ${lim.cpu}: whole CPUs >= 2`);
  if (String(lim["nvidia.com/gpu"]) !== "1") bad.push("one GPU a pod");
  if (env.STRATA_THREADS !== undefined && env.STRATA_THREADS !== "0")
    bad.push("STRATA_THREADS set: strata should size from the CPU limit");
  const mem = bytesOf(lim.memory), kv = Number(env.STRATA_KV_MEM || 0);
  if (!(mem > 0)) bad.push(`memory limit ${lim.memory}`);
  if (kv > 0 && kv > mem / 4) bad.push("the KV pool takes more than a quarter of the memory limit");
  const pre = c.lifecycle?.preStop?.exec?.command;
  const pause = pre && pre[0] === "sleep" ? Number(pre[1]) : 0;
  const drain = Number(env.STRATA_SHUTDOWN_TIMEOUT ?? 10);
  const grace = pod.spec.terminationGracePeriodSeconds ?? 30;
  if (grace < pause + drain + 5) bad.push(`grace ${grace} s < preStop ${pause} + drain ${drain} + 5`);
  const uid = Number((dockerfile.match(/useradd[^\n]*--uid (\d+)/) || [])[1]);
  if (pod.spec.securityContext?.runAsUser !== uid) bad.push(`runAsUser is not the image's uid ${uid}`);
  if (c.command) bad.push("command overrides the image's ENTRYPOINT");
  if (!/ENTRYPOINT \["strata", "serve"\]/.test(dockerfile)) bad.push("Dockerfile ENTRYPOINT changed");
  const expose = Number((dockerfile.match(/^EXPOSE (\d+)/m) || [])[1]);
  if (expose !== port) bad.push(`Dockerfile EXPOSE ${expose} is not ${port}`);
  if (!(c.envFrom || []).some((e) => e.configMapRef?.name === cm.metadata.name))
    bad.push("the container does not take the ConfigMap");
  const mounts = Object.fromEntries((c.volumeMounts || []).map((v) => [v.name, v]));
  const vols = Object.fromEntries((pod.spec.volumes || []).map((v) => [v.name, v]));
  const model = env.STRATA_MODEL || "";
  const mm = Object.values(mounts).find((v) => model.startsWith(v.mountPath + "/"));
  if (!mm) bad.push(`STRATA_MODEL ${model} is on no mounted volume`);
  else if (!mm.readOnly) bad.push("the models volume is not read-only");
  for (const name of Object.keys(mounts)) if (!vols[name]) bad.push(`mount ${name} has no volume`);
  if (c.securityContext?.readOnlyRootFilesystem && env.STRATA_EXPERT_PROFILE &&
      !Object.values(mounts).some((v) => env.STRATA_EXPERT_PROFILE.startsWith(v.mountPath + "/") && !v.readOnly))
    bad.push("STRATA_EXPERT_PROFILE is on a read-only filesystem");
  return bad;
}

function strataOptions() {
  const help = execFileSync(strata, ["serve", "--help"], { encoding: "utf8" });
  return new Set([...help.matchAll(/env (STRATA_[A-Z_]+)\)/g)].map((m) => m[1]));
}

async function main() {
  const files = readdirSync(dir).filter((f) => f.endsWith(".yaml"));
  const manifests = {};
  let kustomization = null;
  for (const f of files) {
    const docs = parseAllDocuments(readFileSync(join(dir, f), "utf8"));
    for (const d of docs) {
      check(`${f}: YAML parses`, d.errors.length === 0, d.errors.map(String).join("; "));
      const obj = d.toJS();
      if (obj.kind === "Kustomization") { kustomization = { file: f, obj }; continue; }
      const errs = manifestErrors(obj);
      check(`${f}: ${obj.kind} valid against the API schema (strict fields)`, errs.length === 0, errs.join("; "));
      check(`${f}: one ${obj.kind}`, !manifests[obj.kind]);
      manifests[obj.kind] = obj;
    }
  }
  for (const k of Object.keys(kinds)) check(`a ${k} manifest`, !!manifests[k]);
  if (Object.keys(kinds).some((k) => !manifests[k])) return;
  check("kustomization lists every manifest", kustomization &&
        JSON.stringify([...kustomization.obj.resources].sort()) ===
        JSON.stringify(files.filter((f) => f !== kustomization.file).sort()), JSON.stringify(kustomization?.obj));

  const dockerfile = readFileSync(join(root, "Dockerfile"), "utf8");
  const bad = consistency(manifests, dockerfile);
  check("manifests agree with each other, the image and strata's sizing", bad.length === 0, bad.join("; "));

  // strata takes the ConfigMap as it is
  const env = manifests.ConfigMap.data;
  const known = strataOptions();
  const unknown = Object.keys(env).filter((k) => !known.has(k));
  check("every ConfigMap key is a strata option", unknown.length === 0 && known.size > 20, unknown.join(","));
  const cleanEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("STRATA_")));
  let printed = "";
  try {
    printed = execFileSync(strata, ["serve", "--print-config"],
      { env: { ...cleanEnv, ...env }, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
    check("strata accepts the ConfigMap's values", true);
  } catch (e) {
    check("strata accepts the ConfigMap's values", false, String(e.stderr || e));
  }
  for (const [k, v] of Object.entries(env)) {
    const name = k.slice(7).toLowerCase().replace(/_/g, "-");
    const line = printed.split("\n").find((l) => l.startsWith(name + " ")) || "";
    const ok = name === "threads" && v === "0" ? /\((affinity|cgroup): /.test(line)
      : line.includes(`= ${v} `) && line.includes("(env)");
    check(`--print-config: ${name} from the ConfigMap`, ok, line);
  }

  // the pod's cgroup as strata would see it: cgroup v2, the limits on the
  // container's cgroup (its namespace root), plenty of host memory
  const c = manifests.Deployment.spec.template.spec.containers.find((x) => x.name === "strata");
  const cpus = Number(c.resources.limits.cpu), mem = bytesOf(c.resources.limits.memory);
  const fake = mkdtempSync(join(tmpdir(), "strata-k8s-"));
  try {
    const put = (p, text) => { mkdirSync(dirname(join(fake, p)), { recursive: true }); writeFileSync(join(fake, p), text); };
    put("proc/self/cgroup", "0::/\n");
    put("proc/self/mountinfo", "31 22 0:28 / /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n");
    put("sys/fs/cgroup/cpu.max", `${cpus * 100000} 100000\n`);
    put("sys/fs/cgroup/memory.max", `${mem}\n`);
    put("proc/meminfo", `MemTotal: ${4 * mem / 1024} kB\nMemAvailable: ${3 * mem / 1024} kB\n`);
    const out = execFileSync(strata, ["serve", "--print-config", "--sys-root", fake],
      { env: { ...cleanEnv, ...env }, encoding: "utf8" });
    check("strata reads the pod's CPU limit as its quota",
          out.includes(`cgroup quota ${cpus.toFixed(2)}`), out.split("\n").filter((l) => l.startsWith("#")).join(" | "));
    check("strata's memory budget is the pod's memory limit (cgroup)",
          out.includes(`# memory budget ${mem / 2 ** 20} MiB (cgroup)`), out.split("\n").filter((l) => l.startsWith("#")).join(" | "));
    const nproc = Number(execFileSync("nproc", { encoding: "utf8" }).trim());
    const th = Number((out.match(/^threads\s+= (\d+)/m) || [])[1]);
    check("threads = min(CPU limit, CPUs here) - 1", th === Math.max(1, Math.min(cpus, nproc) - 1), `${th} (${nproc} CPUs here)`);
  } finally {
    rmSync(fake, { recursive: true, force: true });
  }

  // the checks refuse broken manifests
  const clone = () => JSON.parse(JSON.stringify(manifests));
  const container = (m) => m.Deployment.spec.template.spec.containers[0];
  const schema = {
    "misspelt field (strict)": [(m) => { container(m).readinesProbe = container(m).readinessProbe; delete container(m).readinessProbe; }, /unknown field .*readinesProbe/],
    "unknown field in a probe": [(m) => { container(m).livenessProbe.httpGet.paht = "/x"; }, /unknown field .*paht/],
    "bad quantity": [(m) => { container(m).resources.limits.cpu = "lots"; }, /quantity/],
    "port out of range": [(m) => { container(m).ports[0].containerPort = "http"; }, /integer|number/],
  };
  for (const [name, [f, want]] of Object.entries(schema)) {
    const m = clone();
    f(m);
    const errs = manifestErrors(m.Deployment);
    check(`refused by the schema check: ${name}`, errs.some((e) => want.test(e)), errs.join("; "));
  }
  const inconsistent = {
    "requests != limits": (m) => { container(m).resources.requests.memory = "64Gi"; },
    "probe on another port": (m) => { container(m).livenessProbe.httpGet.port = 9090; },
    "grace shorter than the drain": (m) => { m.Deployment.spec.template.spec.terminationGracePeriodSeconds = 20; },
    "service selects nothing": (m) => { m.Service.spec.selector = { app: "other" }; },
    "model off the volume": (m) => { m.ConfigMap.data.STRATA_MODEL = "/data/model.gguf"; },
    "threads pinned": (m) => { m.ConfigMap.data.STRATA_THREADS = "8"; },
  };
  for (const [name, f] of Object.entries(inconsistent)) {
    const m = clone();
    f(m);
    check(`refused: ${name}`, consistency(m, dockerfile).length > 0);
  }
}

try {
  await main();
} catch (e) {
  check("run", false, e.stack || String(e));
}
console.log(`RESULT kubernetes: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
