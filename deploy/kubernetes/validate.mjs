#!/usr/bin/env node
// Checks Kubernetes manifests without a cluster: the stand-in for kubeconform, which is not installable here.
//
//   npm install --prefix deploy/kubernetes     (kubernetes-models and yaml, versions pinned in package.json)
//   node deploy/kubernetes/validate.mjs [--help] [FILE_OR_DIR...]    (default: the manifests/ folder next to it)
//
// For every YAML document:
//   1. schema: the kubernetes-models class of its apiVersion/kind validates it against the Kubernetes OpenAPI
//      schema (types, required fields, enums, formats); an unknown apiVersion/kind is an error;
//   2. unknown fields: the schema is run again over a proxy that records which properties it reads; a property it
//      never reads in an object it does not enumerate is not in the schema (a typo such as `hostNetwrk`), which
//      the API server would drop or reject but the OpenAPI schema alone accepts;
//   3. references, as the API server or kubelet would find them only at run time: a workload's selector matches
//      its pod labels, every Service selects some pod template and its named target ports exist there, probe ports
//      name a container port, and ConfigMaps, Secrets and their keys used by volumes or env exist in the files.
// Prints one line per problem and exits 1, or prints a summary and exits 0.
import { readFileSync, readdirSync, statSync } from "node:fs";
import { join, dirname, relative } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
if (args.includes("-h") || args.includes("--help")) {
  const text = readFileSync(fileURLToPath(import.meta.url), "utf8").split("\n").slice(1);
  const header = text.slice(0, text.findIndex((l) => !l.startsWith("//")));
  console.log(header.map((l) => l.replace(/^\/\/ ?/, "")).join("\n"));
  process.exit(0);
}
let parseAllDocuments;
try {
  ({ parseAllDocuments } = await import("yaml"));
  await import("kubernetes-models/v1/Namespace");
} catch (e) {
  console.error(`validate: ${e.message}\nvalidate: install its packages first: npm install --prefix ${relative(process.cwd(), here) || "."}`);
  process.exit(2);
}
const inputs = args.length ? args : [join(here, "manifests")];
const problems = [];
const problem = (where, msg) => problems.push(`${where}: ${msg}`);

function yamlFiles(p) {
  if (statSync(p).isDirectory()) {
    return readdirSync(p).sort().filter((f) => /\.ya?ml$/.test(f)).map((f) => join(p, f));
  }
  return [p];
}

// apiVersion "apps/v1" + kind "DaemonSet" -> kubernetes-models/apps/v1/DaemonSet; core "v1" -> kubernetes-models/v1/Service
async function modelClass(apiVersion, kind) {
  if (!/^([a-z0-9.-]+\/)?v[0-9a-z]+$/.test(apiVersion) || !/^[A-Z][A-Za-z0-9]*$/.test(kind)) return null;
  try {
    const mod = await import(`kubernetes-models/${apiVersion}/${kind}`);
    return mod[kind] ?? null;
  } catch (e) {
    if (e.code === "ERR_MODULE_NOT_FOUND" || e.code === "ERR_PACKAGE_PATH_NOT_EXPORTED") return null;
    throw e;
  }
}

// Runs the class's schema check over a recording proxy; returns the paths of properties the schema never looked at.
function unknownFields(Model, data) {
  const seen = new WeakMap();
  const enumerated = new WeakSet();
  const proxies = new WeakMap();
  const note = (t, k) => {
    if (typeof k !== "string") return;
    if (!seen.has(t)) seen.set(t, new Set());
    seen.get(t).add(k);
  };
  const handler = {
    get(t, k, r) { note(t, k); return wrap(Reflect.get(t, k, r)); },
    has(t, k) { note(t, k); return Reflect.has(t, k); },
    getOwnPropertyDescriptor(t, k) { note(t, k); return Reflect.getOwnPropertyDescriptor(t, k); },
    ownKeys(t) { enumerated.add(t); return Reflect.ownKeys(t); }, // maps (labels, data, limits) are enumerated
  };
  function wrap(v) {
    if (v === null || typeof v !== "object") return v;
    if (!proxies.has(v)) proxies.set(v, new Proxy(v, handler));
    return proxies.get(v);
  }
  Model.prototype.validate.call(wrap(data));
  const found = [];
  (function walk(v, path) {
    if (Array.isArray(v)) { v.forEach((e, i) => walk(e, `${path}[${i}]`)); return; }
    if (v === null || typeof v !== "object") return;
    for (const k of Object.keys(v)) {
      const p = path ? `${path}.${k}` : k;
      if (!enumerated.has(v) && !seen.get(v)?.has(k)) found.push(p);
      walk(v[k], p);
    }
  })(data, "");
  return found;
}

const objects = []; // { where, doc }
let files = 0;
for (const input of inputs) {
  for (const file of yamlFiles(input)) {
    files++;
    const name = relative(process.cwd(), file) || file;
    let docs;
    try {
      docs = parseAllDocuments(readFileSync(file, "utf8"));
    } catch (e) {
      problem(name, `cannot read: ${e.message}`);
      continue;
    }
    for (const [i, d] of docs.entries()) {
      if (d.errors.length) { d.errors.forEach((e) => problem(`${name} document ${i + 1}`, `YAML: ${e.message}`)); continue; }
      const doc = d.toJS();
      if (doc === null || doc === undefined) continue; // an empty document (a trailing ---)
      const where = `${name}: ${doc.kind ?? "?"}/${doc.metadata?.name ?? "?"}`;
      if (typeof doc !== "object" || !doc.apiVersion || !doc.kind) { problem(`${name} document ${i + 1}`, "no apiVersion/kind"); continue; }
      const Model = await modelClass(doc.apiVersion, doc.kind);
      if (!Model) { problem(where, `unknown apiVersion/kind ${doc.apiVersion} ${doc.kind}`); continue; }
      try {
        new Model(doc).validate();
      } catch (e) {
        problem(where, `schema: ${e.message}`);
        continue;
      }
      for (const f of unknownFields(Model, doc)) problem(where, `unknown field ${f}`);
      if (!/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(doc.metadata?.name ?? "")) problem(where, "metadata.name is not a DNS-1123 label");
      objects.push({ where, doc });
    }
  }
}

// ---- references between objects -----------------------------------------------------------------------------
const ns = (o) => o.metadata?.namespace ?? "default";
const find = (kind, namespace, name) => objects.find((o) => o.doc.kind === kind && ns(o.doc) === namespace && o.doc.metadata.name === name);
const workloads = objects.filter((o) => ["Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job"].includes(o.doc.kind));
const matches = (selector, labels) => Object.entries(selector ?? {}).every(([k, v]) => labels?.[k] === v);

for (const { where, doc } of workloads) {
  const tmpl = doc.spec.template;
  const sel = doc.spec.selector;
  if (sel?.matchLabels && !matches(sel.matchLabels, tmpl.metadata?.labels)) problem(where, "spec.selector does not match the pod template's labels");
  const spec = tmpl.spec;
  const containers = [...(spec.initContainers ?? []), ...spec.containers];
  const volumes = new Map((spec.volumes ?? []).map((v) => [v.name, v]));
  for (const c of containers) {
    for (const probe of ["startupProbe", "livenessProbe", "readinessProbe"]) {
      const port = c[probe]?.httpGet?.port ?? c[probe]?.tcpSocket?.port;
      if (typeof port === "string" && !(c.ports ?? []).some((p) => p.name === port)) problem(where, `${c.name}.${probe} uses port "${port}", which container ${c.name} does not name`);
    }
    for (const m of c.volumeMounts ?? []) {
      if (!volumes.has(m.name)) problem(where, `${c.name} mounts volume ${m.name}, which the pod does not define`);
      const v = volumes.get(m.name);
      if (m.subPath && v?.configMap) {
        const cm = find("ConfigMap", ns(doc), v.configMap.name);
        if (cm && !(m.subPath in (cm.doc.data ?? {}))) problem(where, `${c.name} mounts key ${m.subPath} of ConfigMap ${v.configMap.name}, which has no such key`);
      }
    }
    for (const e of c.env ?? []) {
      const s = e.valueFrom?.secretKeyRef;
      if (s && !s.optional) {
        const o = find("Secret", ns(doc), s.name);
        if (!o) problem(where, `env ${e.name} uses Secret ${s.name}, not defined in these files`);
        else if (!(s.key in { ...(o.doc.data ?? {}), ...(o.doc.stringData ?? {}) })) problem(where, `env ${e.name} uses key ${s.key} of Secret ${s.name}, which has no such key`);
      }
    }
  }
  for (const v of volumes.values()) {
    if (v.configMap && !v.configMap.optional && !find("ConfigMap", ns(doc), v.configMap.name)) problem(where, `volume ${v.name} uses ConfigMap ${v.configMap.name}, not defined in these files`);
    if (v.secret && !v.secret.optional && !find("Secret", ns(doc), v.secret.secretName)) problem(where, `volume ${v.name} uses Secret ${v.secret.secretName}, not defined in these files`);
  }
}
for (const { where, doc } of objects.filter((o) => o.doc.kind === "Service")) {
  if (!doc.spec?.selector) continue;
  const selected = workloads.filter((w) => ns(w.doc) === ns(doc) && matches(doc.spec.selector, w.doc.spec.template.metadata?.labels));
  if (!selected.length) { problem(where, "selects no pod template in these files"); continue; }
  for (const p of doc.spec.ports ?? []) {
    if (typeof p.targetPort !== "string") continue;
    for (const w of selected) {
      const named = w.doc.spec.template.spec.containers.some((c) => (c.ports ?? []).some((cp) => cp.name === p.targetPort));
      if (!named) problem(where, `port ${p.name ?? p.port} targets "${p.targetPort}", which ${w.doc.kind}/${w.doc.metadata.name} does not name`);
    }
  }
}
for (const { where, doc } of objects) {
  if (doc.kind !== "Namespace" && doc.metadata?.namespace && !find("Namespace", "default", doc.metadata.namespace)) {
    problem(where, `namespace ${doc.metadata.namespace} is not defined in these files`);
  }
}

if (problems.length) {
  for (const p of problems) console.error(p);
  console.error(`validate: ${problems.length} problem(s) in ${files} file(s)`);
  process.exit(1);
}
const kinds = objects.map((o) => o.doc.kind).sort().join(", ");
console.log(`validate: ${objects.length} objects in ${files} file(s) conform (${kinds})`);
