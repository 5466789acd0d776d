#!/usr/bin/env node
// Checks Kubernetes manifests without a cluster: the stand-in for kubeconform, which is not installable here.
//
//   npm ci --prefix deploy/kubernetes          (kubernetes-models and yaml, versions pinned in package-lock.json)
//   node deploy/kubernetes/validate.mjs [--help] [--print] [FILE_OR_DIR...]   (default: the manifests/ folder next to it)
//   --print: when everything conforms, print the objects checked as one YAML stream (what -k would apply)
//
// A folder with a kustomization.yaml is built first, as `kubectl apply -k` would: its resources (files, and folders
// that are Kustomize bases themselves), then its secretGenerator (files, behavior create or replace) and its patches
// (JSON 6902 operations add, replace, remove on the objects their target names); the objects that result are checked.
// A base must list every YAML file of each folder it takes files from, so that `kubectl apply -f FOLDER` and `-k`
// apply the same objects.
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
let parseAllDocuments, stringify;
try {
  ({ parseAllDocuments, stringify } = await import("yaml"));
  await import("kubernetes-models/v1/Namespace");
} catch (e) {
  console.error(`validate: ${e.message}\nvalidate: install its packages first: npm ci --prefix ${relative(process.cwd(), here) || "."}`);
  process.exit(2);
}
const print = args.includes("--print");
const paths = args.filter((a) => a !== "--print");
const inputs = paths.length ? paths : [join(here, "manifests")];
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

// The documents of one YAML file, each { where, doc }; problems for what cannot be read.
function readDocs(file) {
  files++;
  const name = relative(process.cwd(), file) || file;
  let docs;
  try {
    docs = parseAllDocuments(readFileSync(file, "utf8"));
  } catch (e) {
    problem(name, `cannot read: ${e.message}`);
    return [];
  }
  const out = [];
  for (const [i, d] of docs.entries()) {
    if (d.errors.length) { d.errors.forEach((e) => problem(`${name} document ${i + 1}`, `YAML: ${e.message}`)); continue; }
    const doc = d.toJS();
    if (doc === null || doc === undefined) continue; // an empty document (a trailing ---)
    if (typeof doc !== "object" || !doc.apiVersion || !doc.kind) { problem(`${name} document ${i + 1}`, "no apiVersion/kind"); continue; }
    out.push({ where: `${name}: ${doc.kind}/${doc.metadata?.name ?? "?"}`, doc });
  }
  return out;
}

// RFC 6901 pointer -> [parent, key]; numeric keys index arrays, "-" appends.
function locate(doc, pointer) {
  if (!pointer.startsWith("/")) throw new Error(`path ${pointer} does not start with /`);
  const keys = pointer.slice(1).split("/").map((k) => k.replace(/~1/g, "/").replace(/~0/g, "~"));
  let parent = doc;
  for (const k of keys.slice(0, -1)) {
    parent = Array.isArray(parent) ? parent[Number(k)] : parent?.[k];
    if (parent === undefined || parent === null || typeof parent !== "object") throw new Error(`path ${pointer} does not exist`);
  }
  return [parent, keys.at(-1)];
}

function applyOp(doc, op) {
  const [parent, key] = locate(doc, op.path);
  const isArray = Array.isArray(parent);
  const index = key === "-" ? parent.length : Number(key);
  if (isArray && key !== "-" && !(Number.isInteger(index) && index >= 0 && index <= parent.length)) throw new Error(`path ${op.path}: no index ${key}`);
  switch (op.op) {
    case "add":
      if (isArray) parent.splice(index, 0, op.value); else parent[key] = op.value;
      break;
    case "replace":
      if (isArray ? index >= parent.length : !(key in parent)) throw new Error(`replace: path ${op.path} does not exist`);
      if (isArray) parent[index] = op.value; else parent[key] = op.value;
      break;
    case "remove":
      if (isArray ? index >= parent.length : !(key in parent)) throw new Error(`remove: path ${op.path} does not exist`);
      if (isArray) parent.splice(index, 1); else delete parent[key];
      break;
    default:
      throw new Error(`operation ${op.op} is not supported here (add, replace, remove)`);
  }
}

// Builds a Kustomize folder into { where, doc } objects.
function kustomize(dir) {
  const file = join(dir, "kustomization.yaml");
  const name = relative(process.cwd(), file) || file;
  files++;
  let k;
  try {
    k = parseAllDocuments(readFileSync(file, "utf8"))[0].toJS();
  } catch (e) {
    problem(name, `cannot read: ${e.message}`);
    return [];
  }
  if (k?.kind !== "Kustomization") { problem(name, "kind is not Kustomization"); return []; }
  const out = [];
  const listed = new Set(); // absolute paths of the files named in resources
  for (const r of k.resources ?? []) {
    const p = join(dir, r);
    let st;
    try { st = statSync(p); } catch { problem(name, `resource ${r} does not exist`); continue; }
    if (st.isDirectory()) {
      try { statSync(join(p, "kustomization.yaml")); } catch { problem(name, `resource ${r} is a folder without kustomization.yaml`); continue; }
      out.push(...kustomize(p));
    } else {
      listed.add(p);
      out.push(...readDocs(p));
    }
  }
  for (const folder of new Set([...listed].map((f) => dirname(f)))) {
    for (const f of readdirSync(folder).filter((f) => /\.ya?ml$/.test(f) && f !== "kustomization.yaml")) {
      if (!listed.has(join(folder, f))) problem(name, `${relative(dir, join(folder, f))} is in ${relative(dir, folder) || "."} but not in resources: kubectl apply -f and -k would differ`);
    }
  }
  for (const g of k.secretGenerator ?? []) {
    const behavior = g.behavior ?? "create";
    const data = {};
    for (const f of g.files ?? []) {
      const [key, path] = f.includes("=") ? f.split("=", 2) : [f.split("/").at(-1), f];
      try { data[key] = readFileSync(join(dir, path), "utf8"); } catch { problem(name, `secretGenerator ${g.name}: file ${path} does not exist (for a token: head -c 32 /dev/urandom | base64 > ${join(relative(process.cwd(), dir), path)})`); }
    }
    for (const l of g.literals ?? []) { const [key, ...v] = l.split("="); data[key] = v.join("="); }
    if (!g.options?.disableNameSuffixHash) problem(name, `secretGenerator ${g.name}: without disableNameSuffixHash the Secret gets a hashed name the workloads here do not use`);
    const existing = out.find((o) => o.doc.kind === "Secret" && o.doc.metadata?.name === g.name && (o.doc.metadata?.namespace ?? "default") === (g.namespace ?? "default"));
    if (behavior === "replace" || behavior === "merge") {
      if (!existing) { problem(name, `secretGenerator ${g.name}: behavior ${behavior} but the base has no such Secret`); continue; }
      if (behavior === "replace") { delete existing.doc.data; existing.doc.stringData = data; } else existing.doc.stringData = { ...(existing.doc.stringData ?? {}), ...data };
    } else {
      if (existing) { problem(name, `secretGenerator ${g.name}: the base has this Secret already (behavior replace?)`); continue; }
      out.push({ where: `${name}: Secret/${g.name}`, doc: { apiVersion: "v1", kind: "Secret", metadata: { name: g.name, ...(g.namespace ? { namespace: g.namespace } : {}) }, type: g.type ?? "Opaque", stringData: data } });
    }
  }
  for (const [i, p] of (k.patches ?? []).entries()) {
    const targets = out.filter((o) => (!p.target?.kind || o.doc.kind === p.target.kind) && (!p.target?.name || o.doc.metadata?.name === p.target.name));
    if (!targets.length) { problem(name, `patch ${i + 1} targets nothing (${JSON.stringify(p.target)})`); continue; }
    let ops;
    try {
      ops = parseAllDocuments(p.patch ?? readFileSync(join(dir, p.path), "utf8"))[0].toJS();
    } catch (e) { problem(name, `patch ${i + 1}: ${e.message}`); continue; }
    if (!Array.isArray(ops)) { problem(name, `patch ${i + 1} is not a list of JSON 6902 operations`); continue; }
    for (const t of targets) {
      for (const op of ops) {
        try { applyOp(t.doc, op); } catch (e) { problem(name, `patch ${i + 1} on ${t.doc.kind}/${t.doc.metadata?.name}: ${e.message}`); }
      }
      t.where = `${t.where} (patched by ${name})`;
    }
  }
  return out;
}

const isKustomization = (p) => { try { return statSync(join(p, "kustomization.yaml")).isFile(); } catch { return false; } };
const raw = [];
for (const input of inputs) {
  if (statSync(input).isDirectory() && isKustomization(input)) raw.push(...kustomize(input));
  else for (const file of yamlFiles(input)) raw.push(...readDocs(file));
}
for (const { where, doc } of raw) {
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
if (print) process.stdout.write(objects.map((o) => stringify(o.doc)).join("---\n"));
const kinds = objects.map((o) => o.doc.kind).sort().join(", ");
(print ? console.error : console.log)(`validate: ${objects.length} objects in ${files} file(s) conform (${kinds})`);
