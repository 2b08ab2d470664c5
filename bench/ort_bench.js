#!/usr/bin/env node
// ONNX Runtime (CPU, onnxruntime-node) latency baseline for Kiln benchmarks.
//
//   node bench/ort_bench.js MODEL.onnx [--input NAME=FILE.npy ...] [--threads T]
//        [--runs N] [--warmup W] [--seed S] [--output-dir DIR] [--profile PREFIX]
//        [--save-optimized FILE.onnx]
//
// Prints one JSON line: {median_ms, p90_ms, min_ms, mean_ms, max_ms, runs, warmup,
// threads, load_ms, first_ms, peak_rss_bytes, ort_version}; first_ms is the first session.run
// (warm-up or timed), peak_rss_bytes the process's VmHWM. Inputs not given are seeded random (fixed shapes only).
// --input also accepts an input index (0=FILE.npy), like `kiln run`.
// --output-dir writes output_<i>.npy (outputs of the last run) for cross-checking.
// --profile turns on ONNX Runtime's session profiler (PREFIX_<date>.json, every run's node
// spans, warm-up included); the JSON line names the file as profile_file. bench/ort_ops.py sums
// it per op type (each node's median over runs), like `kiln bench --profile`'s table.
// --save-optimized writes the model as ONNX Runtime's graph optimizer left it ('extended'
// level, the highest whose output is portable ONNX plus com.microsoft ops), then runs that.
// Install the runtime first with scripts/install_ort.sh. Keep command lines short:
// onnxruntime-node has been seen to crash with command lines over ~28 KB.
'use strict';

const fs = require('fs');
const path = require('path');

function die(msg) {
  process.stderr.write(`ort_bench: error: ${msg}\n`);
  process.exit(2);
}

function usage() {
  return 'usage: node bench/ort_bench.js MODEL.onnx [--input NAME=FILE.npy ...] ' +
         '[--threads T] [--runs N] [--warmup W] [--seed S] [--output-dir DIR] [--profile PREFIX] ' +
         '[--save-optimized FILE.onnx]';
}

function parseArgs(argv) {
  const a = {model: null, inputs: [], threads: 1, runs: 50, warmup: 5, seed: 0, outputDir: null};
  const intArg = (name, v, min) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < min) die(`${name} needs an integer >= ${min}, got '${v}'`);
    return n;
  };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) die(`${k} needs a value\n${usage()}`);
      return argv[++i];
    };
    if (k === '--input') {
      const v = next();
      const eq = v.indexOf('=');
      if (eq <= 0) die(`--input expects NAME=FILE.npy or INDEX=FILE.npy, got '${v}'`);
      a.inputs.push([v.slice(0, eq), v.slice(eq + 1)]);
    } else if (k === '--threads') a.threads = intArg(k, next(), 1);
    else if (k === '--runs') a.runs = intArg(k, next(), 1);
    else if (k === '--warmup') a.warmup = intArg(k, next(), 0);
    else if (k === '--seed') a.seed = intArg(k, next(), 0);
    else if (k === '--output-dir') a.outputDir = next();
    else if (k === '--profile') a.profile = next();
    else if (k === '--save-optimized') a.saveOptimized = next();
    else if (k === '-h' || k === '--help') { console.log(usage()); process.exit(0); }
    else if (k.startsWith('-')) die(`unknown option ${k}\n${usage()}`);
    else if (a.model === null) a.model = k;
    else die(`unexpected argument '${k}'\n${usage()}`);
  }
  if (a.model === null) die(`no model given\n${usage()}`);
  return a;
}

// ---- .npy I/O (C order; v1 / v2 / v3 headers) ----
const NPY_DTYPES = {  // descr (without byte order) -> [ort type, TypedArray]
  f4: ['float32', Float32Array], f8: ['float64', Float64Array], f2: ['float16', Uint16Array],
  i4: ['int32', Int32Array], i8: ['int64', BigInt64Array],
  b1: ['bool', Uint8Array], u1: ['uint8', Uint8Array], i1: ['int8', Int8Array],
};

function readNpy(file) {
  let buf;
  try { buf = fs.readFileSync(file); } catch (e) { die(`cannot read ${file}: ${e.message}`); }
  if (buf.length < 10 || buf.readUInt8(0) !== 0x93 || buf.toString('latin1', 1, 6) !== 'NUMPY') {
    die(`${file}: not a .npy file`);
  }
  const major = buf.readUInt8(6);
  let hlen, hstart;
  if (major === 1) { hlen = buf.readUInt16LE(8); hstart = 10; }
  else if (major === 2 || major === 3) { hlen = buf.readUInt32LE(8); hstart = 12; }
  else die(`${file}: unsupported .npy version ${major}`);
  const header = buf.toString('latin1', hstart, hstart + hlen);
  const descr = /'descr'\s*:\s*'([^']*)'/.exec(header);
  const fortran = /'fortran_order'\s*:\s*(True|False)/.exec(header);
  const shape = /'shape'\s*:\s*\(([^)]*)\)/.exec(header);
  if (!descr || !fortran || !shape) die(`${file}: cannot parse .npy header: ${header.trim()}`);
  if (fortran[1] === 'True') die(`${file}: Fortran-order arrays are not supported (save C order)`);
  const d = descr[1];
  if (d[0] === '>') die(`${file}: big-endian dtype ${d} is not supported`);
  const kind = NPY_DTYPES[d.replace(/^[<|=]/, '')];
  if (!kind) die(`${file}: unsupported dtype ${d} (float32/float64/float16/int32/int64/bool/uint8/int8)`);
  const dims = shape[1].split(',').map(s => s.trim()).filter(s => s.length).map(Number);
  const count = dims.reduce((p, x) => p * x, 1);
  const off = hstart + hlen;
  const nbytes = count * kind[1].BYTES_PER_ELEMENT;
  if (buf.length - off < nbytes) die(`${file}: truncated data (${buf.length - off} < ${nbytes} bytes)`);
  // Copy into a fresh, aligned ArrayBuffer (Buffer slices may be unaligned).
  const ab = new ArrayBuffer(nbytes);
  new Uint8Array(ab).set(buf.subarray(off, off + nbytes));
  let data = new kind[1](ab);
  if (kind[0] === 'bool') data = Uint8Array.from(data, v => (v ? 1 : 0));
  return {type: kind[0], dims, data};
}

const NPY_DESCR = {float32: '<f4', float64: '<f8', float16: '<f2', int32: '<i4', int64: '<i8',
                   bool: '|b1', uint8: '|u1', int8: '|i1'};

function writeNpy(file, tensor) {
  const descr = NPY_DESCR[tensor.type];
  if (!descr) { process.stderr.write(`ort_bench: skip ${file}: dtype ${tensor.type}\n`); return; }
  const shp = tensor.dims.length === 1 ? `(${tensor.dims[0]},)` : `(${tensor.dims.join(', ')})`;
  let h = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shp}, }`;
  h += ' '.repeat(63 - ((10 + h.length) % 64)) + '\n';  // pad so the data starts 64-aligned
  const pre = Buffer.alloc(10);
  pre.writeUInt8(0x93, 0); pre.write('NUMPY', 1, 'latin1');
  pre.writeUInt8(1, 6); pre.writeUInt8(0, 7); pre.writeUInt16LE(h.length, 8);
  const d = tensor.data;
  fs.writeFileSync(file, Buffer.concat([pre, Buffer.from(h, 'latin1'),
                                        Buffer.from(d.buffer, d.byteOffset, d.byteLength)]));
}

// ---- seeded random inputs ----
function mulberry32(seed) {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6D2B79F5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function randomInput(meta, rnd) {
  if (!meta.isTensor) die(`input '${meta.name}' is not a tensor; pass it with --input`);
  const dims = meta.shape;
  if (!dims.every(x => typeof x === 'number' && x >= 0)) {
    die(`input '${meta.name}' has a non-fixed shape [${dims.join(',')}]; ` +
        `pass --input ${meta.name}=FILE.npy`);
  }
  const n = dims.reduce((p, x) => p * x, 1);
  const t = meta.type;
  let data;
  if (t === 'float32' || t === 'float64') {
    data = new (t === 'float32' ? Float32Array : Float64Array)(n);
    for (let i = 0; i < n; i++) data[i] = rnd() * 2 - 1;
  } else if (t === 'int32' || t === 'int64' || t === 'uint8' || t === 'int8') {
    const Arr = {int32: Int32Array, int64: BigInt64Array, uint8: Uint8Array, int8: Int8Array}[t];
    data = new Arr(n);
    for (let i = 0; i < n; i++) {
      const v = Math.floor(rnd() * 10);
      data[i] = t === 'int64' ? BigInt(v) : v;
    }
  } else if (t === 'bool') {
    data = new Uint8Array(n);
    for (let i = 0; i < n; i++) data[i] = rnd() < 0.5 ? 1 : 0;
  } else {
    die(`input '${meta.name}': cannot generate random data of type ${t}; pass it with --input`);
  }
  return {type: t, dims: dims.slice(), data};
}

// This process's peak resident set (VmHWM), bytes; -1 where unreadable.
// (process.resourceUsage().maxRSS would include the parent's size at fork.)
function peakRssBytes() {
  try {
    const m = /VmHWM:\s*(\d+)\s*kB/.exec(fs.readFileSync('/proc/self/status', 'latin1'));
    return m ? Number(m[1]) * 1024 : -1;
  } catch (e) { return -1; }
}

function percentile(sorted, p) {  // nearest-rank
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))];
}

function median(sorted) {
  const m = sorted.length >> 1;
  return sorted.length % 2 ? sorted[m] : (sorted[m - 1] + sorted[m]) / 2;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  if (!fs.existsSync(args.model)) die(`model not found: ${args.model}`);
  const modDir = path.join(__dirname, 'ort', 'node_modules', 'onnxruntime-node');
  let ort;
  try { ort = require(modDir); } catch (e) {
    die(`cannot load onnxruntime-node from ${modDir} (${e.message.split('\n')[0]}); ` +
        'run scripts/install_ort.sh');
  }
  let version = 'unknown';
  try { version = require(path.join(modDir, 'package.json')).version; } catch (e) { /* ignore */ }

  const opts = {
    executionProviders: ['cpu'],
    intraOpNumThreads: args.threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
    logSeverityLevel: 3,
  };
  if (args.profile) {
    opts.enableProfiling = true;
    opts.profileFilePrefix = args.profile;
  }
  if (args.saveOptimized) {
    opts.graphOptimizationLevel = 'extended';
    opts.optimizedModelFilePath = args.saveOptimized;
  }
  const t0 = process.hrtime.bigint();
  const session = await ort.InferenceSession.create(args.model, opts);
  const loadMs = Number(process.hrtime.bigint() - t0) / 1e6;

  const metas = session.inputMetadata ||
                session.inputNames.map(name => ({name, isTensor: true, type: 'float32', shape: []}));
  const given = new Map();
  for (const [key, file] of args.inputs) {
    let name = key;
    if (/^\d+$/.test(key)) {
      const idx = Number(key);
      if (idx >= metas.length) die(`input index ${idx} out of range (model has ${metas.length} inputs)`);
      name = metas[idx].name;
    } else if (!session.inputNames.includes(key)) {
      die(`model has no input '${key}' (inputs: ${session.inputNames.join(', ')})`);
    }
    given.set(name, readNpy(file));
  }
  const rnd = mulberry32(args.seed);
  const feeds = {};
  for (const meta of metas) {
    const v = given.get(meta.name) || randomInput(meta, rnd);
    if (meta.isTensor && meta.type && meta.type !== v.type) {
      die(`input '${meta.name}': model wants ${meta.type}, got ${v.type}`);
    }
    feeds[meta.name] = new ort.Tensor(v.type, v.data, v.dims);
  }

  let firstMs = null;  // the first run's time, whether warm-up or timed
  for (let i = 0; i < args.warmup; i++) {
    const s = process.hrtime.bigint();
    await session.run(feeds);
    if (i === 0) firstMs = Number(process.hrtime.bigint() - s) / 1e6;
  }
  const times = [];
  let out = null;
  for (let i = 0; i < args.runs; i++) {
    const s = process.hrtime.bigint();
    out = await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - s) / 1e6);
    if (firstMs === null) firstMs = times[0];
  }
  if (args.outputDir) {
    fs.mkdirSync(args.outputDir, {recursive: true});
    session.outputNames.forEach((name, i) =>
      writeNpy(path.join(args.outputDir, `output_${i}.npy`), out[name]));
  }
  let profileFile = null;
  if (args.profile) {
    await session.endProfiling();
    // The profiler names its file PREFIX_<date and time>.json: the newest such file is this run's.
    const dir = path.dirname(path.resolve(args.profile)), base = path.basename(args.profile) + '_';
    const found = fs.readdirSync(dir).filter(f => f.startsWith(base) && f.endsWith('.json'))
                    .map(f => path.join(dir, f)).sort((x, y) => fs.statSync(y).mtimeMs - fs.statSync(x).mtimeMs);
    profileFile = found.length ? found[0] : null;
  }
  const sorted = times.slice().sort((x, y) => x - y);
  const r = x => Math.round(x * 1000) / 1000;
  console.log(JSON.stringify({
    median_ms: r(median(sorted)), p90_ms: r(percentile(sorted, 0.9)), min_ms: r(sorted[0]),
    mean_ms: r(times.reduce((p, x) => p + x, 0) / times.length), max_ms: r(sorted[sorted.length - 1]),
    runs: args.runs, warmup: args.warmup, threads: args.threads, load_ms: r(loadMs), first_ms: r(firstMs),
    peak_rss_bytes: peakRssBytes(),
    ort_version: version,
    ...(args.profile ? {profile_file: profileFile} : {}),
  }));
  await session.release();
}

main().catch(e => die(e && e.stack ? e.stack : String(e)));
