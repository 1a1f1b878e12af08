// The Kubernetes manifests of deploy/k8s (docs/DEPLOY.md): every object valid against the Kubernetes API
// schema with no unknown field, the Deployment consistent with the server it starts (flags that
// `dgemma serve --help` lists, probes on /health, the scrape on /metrics, a grace period that covers the
// drain), and the metric names the routers of docs/DEPLOY.md read exported by a running server.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { validateObject } from './k8s_schema.mjs';

const ROOT = process.env.DGEMMA_SOURCE_DIR ?? path.resolve(import.meta.dirname, '../..');
const MANIFEST_DIR = path.join(ROOT, 'deploy', 'k8s');
const kExitMarginS = 10;  // after the drain: the last answers written, the process gone

function loadManifests() {
  const files = fs.readdirSync(MANIFEST_DIR).filter((f) => f.endsWith('.yaml')).sort();
  return files.map((file) => {
    const docs = parseAllDocuments(fs.readFileSync(path.join(MANIFEST_DIR, file), 'utf8'));
    for (const d of docs) {
      if (d.errors.length) throw new Error(`${file}: ${d.errors.map((e) => e.message).join('; ')}`);
    }
    return { file, objects: docs.map((d) => d.toJS()).filter((o) => o !== null) };
  });
}
const manifests = loadManifests();
const objects = manifests.flatMap((m) => m.objects);
const byKind = (kind) => objects.filter((o) => o.kind === kind);
const one = (kind) => {
  const found = byKind(kind);
  assert.equal(found.length, 1, `one ${kind} in deploy/k8s`);
  return found[0];
};

// `--name=value` and `--name value` arguments as a map; bare flags map to true.
function flagsOf(args) {
  const flags = new Map();
  for (let i = 0; i < args.length; ++i) {
    const a = args[i];
    if (!a.startsWith('--')) continue;
    const eq = a.indexOf('=');
    if (eq > 0) flags.set(a.slice(2, eq), a.slice(eq + 1));
    else if (i + 1 < args.length && !args[i + 1].startsWith('--')) flags.set(a.slice(2), args[++i]);
    else flags.set(a.slice(2), true);
  }
  return flags;
}

describe('schema', () => {
  test('deploy/k8s holds the manifests docs/DEPLOY.md names', () => {
    assert.ok(manifests.length >= 4, 'manifests found');
    const doc = fs.readFileSync(path.join(ROOT, 'docs', 'DEPLOY.md'), 'utf8');
    for (const { file, objects: objs } of manifests) {
      assert.ok(objs.length > 0, `${file} has an object`);
      assert.ok(doc.includes(`deploy/k8s/${file}`), `docs/DEPLOY.md names deploy/k8s/${file}`);
    }
  });

  for (const { file, objects: objs } of manifests) {
    test(`${file}: valid, no unknown field`, async () => {
      for (const o of objs) assert.deepEqual(await validateObject(o), [], `${o.kind} ${o.metadata?.name}`);
    });
  }

  // Each mistake is made in a copy of the Deployment; the validator must name the path it is on.
  const podSpec = '/spec/template/spec';
  const mistakes = [
    ['a misspelt probe', (d) => renameKey(container(d), 'readinessProbe', 'readinesProbe'),
      `${podSpec}/containers/0/readinesProbe: unknown field`],
    ['a misspelt top-level field', (d) => renameKey(d, 'spec', 'spce'), '/spce: unknown field'],
    ['a misspelt metadata field', (d) => renameKey(d.metadata, 'labels', 'label'),
      '/metadata/label: unknown field'],
    ['a misspelt pod field',
      (d) => renameKey(d.spec.template.spec, 'terminationGracePeriodSeconds', 'terminationGracePeriod'),
      `${podSpec}/terminationGracePeriod: unknown field`],
    ['a port given as a string', (d) => (container(d).ports[0].containerPort = '8000'),
      `${podSpec}/containers/0/ports/0/containerPort: must be integer`],
    ['a missing required field', (d) => delete container(d).name,
      `${podSpec}/containers/0: must have required property name`],
    ['a list where an object belongs', (d) => (d.spec.selector = [d.spec.selector]),
      '/spec/selector: must be object'],
  ];
  for (const [what, mutate, expected] of mistakes) {
    test(`rejects ${what}`, async () => {
      const d = structuredClone(one('Deployment'));
      mutate(d);
      const problems = await validateObject(d);
      assert.ok(problems.includes(expected), `expected "${expected}" in:\n${problems.join('\n')}`);
    });
  }

  test('rejects a kind or apiVersion it has no schema for', async () => {
    assert.match((await validateObject({ apiVersion: 'apps/v1', kind: 'Deployments' }))[0],
      /no schema for kind/);
    assert.match((await validateObject({ apiVersion: 'monitoring.coreos.com/v1', kind: 'PodMonitor' }))[0],
      /no schema for apiVersion/);
    assert.match((await validateObject({ apiVersion: '../../x', kind: 'Deployment' }))[0], /bad apiVersion/);
  });
});

function container(deployment) {
  return deployment.spec.template.spec.containers.find((c) => c.name === 'dgemma');
}
function renameKey(obj, from, to) {
  assert.ok(from in obj, `${from} present`);
  obj[to] = obj[from];
  delete obj[from];
}

describe('the Deployment and dgemma', () => {
  const deployment = one('Deployment');
  const pod = deployment.spec.template;
  const c = container(deployment);
  const flags = flagsOf(c.args);
  const port = c.ports.find((p) => p.name === 'http');

  test('every flag is one `dgemma serve --help` lists', async (t) => {
    if (!process.env.DGEMMA_BIN) return t.skip('DGEMMA_BIN not set: the flags are not checked');
    const { runCli } = await import('../e2e/helpers.mjs');
    const help = await runCli(['serve', '--help']);
    assert.equal(help.code, 0, help.stderr);
    assert.equal(c.args[0], 'serve');
    for (const name of flags.keys())
      assert.match(help.stdout, new RegExp(`--${name}(?![\\w-])`), `--${name} in serve --help`);
  });

  test('the server listens where the probes, the Service and the scrape look', () => {
    assert.equal(Number(flags.get('port')), port.containerPort);
    assert.equal(flags.get('host'), '0.0.0.0');
    assert.equal(flags.get('device'), 'cuda', 'no silent fallback to the CPU backend');
    for (const probe of ['startupProbe', 'readinessProbe', 'livenessProbe']) {
      assert.equal(c[probe].httpGet.path, '/health', probe);
      assert.equal(c[probe].httpGet.port, port.name, probe);
    }
    const a = pod.metadata.annotations;
    assert.equal(a['prometheus.io/scrape'], 'true');
    assert.equal(Number(a['prometheus.io/port']), port.containerPort);
    assert.equal(a['prometheus.io/path'], '/metrics');
    assert.equal(c.resources.limits['nvidia.com/gpu'], 1);
  });

  test('the grace period covers the preStop pause, the drain and the exit', () => {
    const drain = Number(flags.get('shutdown-timeout'));
    assert.ok(drain > 0, '--shutdown-timeout set');
    const pause = c.lifecycle.preStop.sleep.seconds;
    assert.ok(pod.spec.terminationGracePeriodSeconds >= pause + drain + kExitMarginS,
      `${pod.spec.terminationGracePeriodSeconds} >= ${pause} + ${drain} + ${kExitMarginS}`);
    // /health answers 503 during the drain: the liveness window must outlast it.
    assert.ok(c.livenessProbe.periodSeconds * c.livenessProbe.failureThreshold > drain);
  });

  test('the Service, the PodDisruptionBudget and the volumes point at what exists', () => {
    const labels = pod.metadata.labels;
    const matches = (selector) => Object.entries(selector).every(([k, v]) => labels[k] === v);
    const service = one('Service');
    assert.ok(matches(service.spec.selector), 'Service selects the pods');
    const target = service.spec.ports[0].targetPort;
    assert.ok(c.ports.some((p) => p.name === target), 'Service targets a named port');
    assert.ok(matches(one('PodDisruptionBudget').spec.selector.matchLabels), 'PDB selects the pods');
    assert.ok(matches(deployment.spec.selector.matchLabels), 'Deployment selects its pods');
    const claim = one('PersistentVolumeClaim').metadata.name;
    const job = one('Job');
    for (const spec of [pod.spec, job.spec.template.spec])
      assert.ok(spec.volumes.some((v) => v.persistentVolumeClaim?.claimName === claim), `${claim} mounted`);
    // The download writes the Hugging Face cache where the server looks for it.
    const download = job.spec.template.spec.containers[0].args.join(' ');
    const expected = `hf download ${c.args[1]} --cache-dir ${flags.get('download-dir')}`;
    assert.ok(download.includes(expected), download);
  });
});

// The names the routers of docs/DEPLOY.md read from /metrics (their sources: the llm-d inference
// scheduler's vLLM engine defaults, the vLLM production stack router's engine scraper).
const kRouterGauges = [
  'vllm:num_requests_waiting', // inference scheduler (queue scorer), production stack router
  'vllm:num_requests_running', // inference scheduler, production stack router
  'vllm:kv_cache_usage_perc', // inference scheduler (KV-cache utilisation scorer)
  'vllm:gpu_cache_usage_perc', // production stack router
  'vllm:lora_requests_info', // inference scheduler (LoRA affinity; no adapters here)
];
// The prefix-cache counters under vLLM's current names; the production stack router reads them under
// their former `vllm:gpu_prefix_cache_*` names, which are not exported (docs/DEPLOY.md).
const kPrefixCacheCounters = ['vllm:prefix_cache_queries_total', 'vllm:prefix_cache_hits_total'];

const noBinary = !process.env.DGEMMA_BIN && 'DGEMMA_BIN not set';
describe('the metric names the routers read', { skip: noBinary }, () => {
  let server;
  let helpers;
  before(async () => {
    helpers = await import('../e2e/helpers.mjs');
    const script = { canvas_length: 8, replies: [], default: { random_canvases: 1 } };
    const modelDir = helpers.makeModelDir({ script });
    server = await helpers.startServer({ modelDir, args: ['--served-model-name', 'dg'] });
  });
  after(async () => server?.stop());

  test('exported as gauges and counters with the model label', async () => {
    const m = await helpers.metrics(server);
    for (const name of kRouterGauges) {
      assert.equal(m.types.get(name), 'gauge', name);
      assert.notEqual(helpers.sample(m, name, { model_name: 'dg' }), undefined, name);
    }
    for (const name of kPrefixCacheCounters) {
      assert.equal(m.types.get(name), 'counter', name);
      assert.notEqual(helpers.sample(m, name), undefined, name);
    }
    const lora = { max_lora: '0', running_lora_adapters: '', waiting_lora_adapters: '' };
    assert.notEqual(helpers.sample(m, 'vllm:lora_requests_info', lora), undefined);
  });
});
