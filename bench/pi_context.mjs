#!/usr/bin/env node
// Reference oracle: ask the real pi SessionManager what context it builds for
// one or more session files, so journal's projection can be diffed against it.
//
// Usage:
//   node bench/pi_context.mjs [options] FILE.jsonl [FILE.jsonl ...]
//
// Options:
//   --pi-dir DIR   pi-coding-agent package directory (default: $PI_DIR, else
//                  /tmp/pi/node_modules/@mariozechner/pi-coding-agent)
//   --direct       import dist/core/session-manager.js instead of the package's
//                  public entry point (same code, much faster import)
//   --time         add "ms": open + buildSessionContext() time, measured in node
//   --repeat N     with --time: run open+build N times on fresh copies and also
//                  report "ms_min" / "ms_median" (first run is still "ms")
//   --counts       print "counts" (messages per role) instead of "messages"
//
// Each input file is copied into a private temp dir before pi opens it: pi
// rewrites migrated (v1/v2) files and truncates files whose header is invalid,
// and the originals must never be touched.
//
// Output: one JSON object per input file, one per line:
//   {"path", "messages", "thinkingLevel", "model", "leafId"[, "ms", ...]}
// Values are serialised exactly as pi holds them: a key whose value is
// undefined in pi (e.g. leafId when the last entry has no id, thinkingLevel
// when a thinking_level_change lacks the field) is absent, and NaN timestamps
// become null. leafIds of v1 files are random per load (pi re-ids on migration).
// A file that makes pi throw yields {"path", "error"} and exit status 1.

import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

const DEFAULT_PI_DIR = "/tmp/pi/node_modules/@mariozechner/pi-coding-agent";

function usage(msg) {
    if (msg) process.stderr.write(`pi_context: ${msg}\n`);
    process.stderr.write(
        "usage: node bench/pi_context.mjs [--pi-dir DIR] [--direct] [--time] [--repeat N] [--counts] FILE...\n",
    );
    process.exit(2);
}

function parseArgs(argv) {
    const opts = { piDir: process.env.PI_DIR || DEFAULT_PI_DIR, direct: false, time: false, repeat: 1, counts: false };
    const files = [];
    for (let i = 0; i < argv.length; i++) {
        const a = argv[i];
        if (a === "--pi-dir") {
            if (i + 1 >= argv.length) usage("--pi-dir needs a value");
            opts.piDir = argv[++i];
        } else if (a.startsWith("--pi-dir=")) {
            opts.piDir = a.slice("--pi-dir=".length);
        } else if (a === "--direct") {
            opts.direct = true;
        } else if (a === "--time") {
            opts.time = true;
        } else if (a === "--repeat") {
            opts.repeat = Number.parseInt(argv[++i], 10);
        } else if (a.startsWith("--repeat=")) {
            opts.repeat = Number.parseInt(a.slice("--repeat=".length), 10);
        } else if (a === "--counts") {
            opts.counts = true;
        } else if (a === "-h" || a === "--help") {
            usage();
        } else if (a === "--") {
            files.push(...argv.slice(i + 1));
            break;
        } else if (a.startsWith("--")) {
            usage(`unknown option ${a}`);
        } else {
            files.push(a);
        }
    }
    if (!Number.isInteger(opts.repeat) || opts.repeat < 1) usage("--repeat must be a positive integer");
    if (files.length === 0) usage("no session files given");
    return { opts, files };
}

// Work out which module to import: the package's own "." export (what an
// application would import), or the session-manager module it re-exports.
function resolveEntry(piDir, direct) {
    const pkgPath = join(piDir, "package.json");
    if (!existsSync(pkgPath)) throw new Error(`no package.json in ${piDir} (set PI_DIR or --pi-dir)`);
    const pkg = JSON.parse(readFileSync(pkgPath, "utf8"));
    if (direct) return { pkg, entry: join(piDir, "dist", "core", "session-manager.js") };
    let rel;
    const dot = pkg.exports && (typeof pkg.exports === "string" ? pkg.exports : pkg.exports["."]);
    if (typeof dot === "string") rel = dot;
    else if (dot && typeof dot === "object") rel = dot.import || dot.default;
    rel = rel || pkg.module || pkg.main || "dist/index.js";
    return { pkg, entry: join(piDir, rel) };
}

function roleCounts(messages) {
    const counts = {};
    for (const m of messages) {
        const role = m && typeof m === "object" ? String(m.role) : typeof m;
        counts[role] = (counts[role] || 0) + 1;
    }
    return counts;
}

// Copy `src` into a fresh temp dir, let pi open the copy, build the context.
function runOnce(SessionManager, src) {
    const dir = mkdtempSync(join(tmpdir(), "pi-context-"));
    try {
        const copy = join(dir, basename(src));
        copyFileSync(src, copy);
        const t0 = performance.now();
        // Passing our temp dir as sessionDir keeps pi away from ~/.pi.
        const sm = SessionManager.open(copy, dir);
        const ctx = sm.buildSessionContext();
        const ms = performance.now() - t0;
        return { ctx, leafId: sm.getLeafId(), ms };
    } finally {
        rmSync(dir, { recursive: true, force: true });
    }
}

async function main() {
    const { opts, files } = parseArgs(process.argv.slice(2));
    const piDir = resolve(opts.piDir);
    const { pkg, entry } = resolveEntry(piDir, opts.direct);
    const mod = await import(pathToFileURL(entry).href);
    const { SessionManager } = mod;
    if (typeof SessionManager?.open !== "function") {
        throw new Error(`${entry} does not export SessionManager.open (pi ${pkg.version})`);
    }

    let status = 0;
    for (const file of files) {
        const out = { path: file };
        try {
            if (!existsSync(file)) throw new Error("no such file");
            const first = runOnce(SessionManager, file);
            const { ctx } = first;
            if (opts.counts) out.counts = roleCounts(ctx.messages);
            else out.messages = ctx.messages;
            out.thinkingLevel = ctx.thinkingLevel;
            out.model = ctx.model;
            out.leafId = first.leafId;
            if (opts.counts) out.messageCount = ctx.messages.length;
            if (opts.time) {
                out.ms = Number(first.ms.toFixed(3));
                if (opts.repeat > 1) {
                    const times = [first.ms];
                    for (let i = 1; i < opts.repeat; i++) times.push(runOnce(SessionManager, file).ms);
                    times.sort((a, b) => a - b);
                    out.ms_min = Number(times[0].toFixed(3));
                    out.ms_median = Number(times[Math.floor(times.length / 2)].toFixed(3));
                    out.runs = times.length;
                }
                out.pi_version = pkg.version;
            }
        } catch (err) {
            status = 1;
            out.error = String(err?.stack || err);
        }
        // JSON.stringify turns NaN timestamps into null, as pi's own output would.
        process.stdout.write(`${JSON.stringify(out)}\n`);
    }
    process.exitCode = status;
}

main().catch((err) => {
    process.stderr.write(`pi_context: ${err?.stack || err}\n`);
    process.exit(2);
});
