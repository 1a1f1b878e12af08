// Validates a Kubernetes object against the API's OpenAPI schema as the npm package kubernetes-models
// compiles it (types, formats, required fields), and rejects field names the schema does not know, as
// the API server's strict field validation does: a misspelt optional field (`readinesProbe`) would
// otherwise pass the schema and be dropped by the cluster without a word.
//
// Unknown fields are found by watching the compiled validator read the object: it looks up every field
// its schema declares and enumerates the keys of maps (labels, resource lists). A key it never looked
// at, in an object whose keys it never enumerated, is not in the schema.

const kApiVersion = /^([a-z0-9]([a-z0-9.-]*[a-z0-9])?\/)?v[0-9]+((alpha|beta)[0-9]+)?$/;

// The object's data wrapped so that reads are recorded; `objects` collects one entry per object.
function watched(value, path, objects) {
  if (value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) return value.map((v, i) => watched(v, `${path}/${i}`, objects));
  const entry = { path, keys: Object.keys(value), read: new Set(), enumerated: false };
  objects.push(entry);
  const copy = {};
  for (const [k, v] of Object.entries(value)) copy[k] = watched(v, `${path}/${k}`, objects);
  return new Proxy(copy, {
    get(target, key, receiver) {
      if (typeof key === 'string') entry.read.add(key);
      return Reflect.get(target, key, receiver);
    },
    has(target, key) {
      if (typeof key === 'string') entry.read.add(key);
      return Reflect.has(target, key);
    },
    ownKeys(target) {
      entry.enumerated = true;
      return Reflect.ownKeys(target);
    },
  });
}

// The model class of an object's apiVersion and kind, or an error message.
async function modelClass(doc) {
  const { apiVersion, kind } = doc ?? {};
  if (typeof apiVersion !== 'string' || !kApiVersion.test(apiVersion))
    return { error: `bad apiVersion ${apiVersion}` };
  if (typeof kind !== 'string' || !/^[A-Z][A-Za-z0-9]*$/.test(kind)) return { error: `bad kind ${kind}` };
  let module;
  try {
    module = await import(`kubernetes-models/${apiVersion}`);
  } catch {
    return { error: `no schema for apiVersion ${apiVersion} (kind ${kind})` };
  }
  const cls = module[kind];
  if (typeof cls !== 'function' || cls.apiVersion !== apiVersion || cls.kind !== kind)
    return { error: `no schema for kind ${kind} in ${apiVersion}` };
  return { cls };
}

// Every problem with one Kubernetes object, as "path: message" strings; empty when it is valid.
export async function validateObject(doc) {
  const { cls, error } = await modelClass(doc);
  if (error) return [error];
  const objects = [];
  const data = watched(doc, '', objects);
  const problems = [];
  try {
    cls.prototype.validate.call(data);
  } catch (e) {
    const errors = Array.isArray(e.errors) ? e.errors : [];
    if (errors.length === 0) problems.push(String(e.message));
    for (const err of errors) problems.push(`${err.instancePath || '/'}: ${err.message}`);
  }
  const unknown = [];  // objects come parent first: what lies under an unknown field is not reported again
  for (const o of objects) {
    if (o.enumerated || unknown.some((u) => o.path === u || o.path.startsWith(`${u}/`))) continue;
    for (const k of o.keys) if (!o.read.has(k)) unknown.push(`${o.path}/${k}`);
  }
  for (const u of unknown) problems.push(`${u}: unknown field`);
  return problems;
}
