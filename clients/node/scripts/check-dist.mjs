// Checks that dist/src (the library build the package ships, committed so
// that installing from a path or a tarball needs no compiler and no
// network) is the build of src as it stands: compiles src into a
// temporary directory and compares file by file.
//
//   node scripts/check-dist.mjs          fail when stale (npm test runs this)
//   node scripts/check-dist.mjs --skip-without-compiler
//                                       the same, but pass when TypeScript
//                                       is not installed (npm pack runs this)
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const tsc = path.join(root, "node_modules", "typescript", "bin", "tsc");

if (!existsSync(tsc)) {
  if (process.argv.includes("--skip-without-compiler")) {
    console.error("check-dist: TypeScript is not installed; shipping dist/src as committed");
    process.exit(0);
  }
  console.error("check-dist: TypeScript is not installed: run npm ci");
  process.exit(1);
}

const files = (dir) =>
  readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => path.relative(dir, path.join(entry.parentPath ?? entry.path, entry.name)))
    .sort();

// Beside dist, at its depth: the source maps' relative paths come out the same.
const out = mkdtempSync(path.join(root, ".check-dist-"));
let stale = [];
try {
  const built = spawnSync(process.execPath, [tsc, "-p", "tsconfig.build.json", "--outDir", out], {
    cwd: root,
    stdio: "inherit",
  });
  if (built.status !== 0) process.exit(built.status ?? 1);
  const fresh = path.join(out, "src");
  const shipped = path.join(root, "dist", "src");
  const want = files(fresh);
  const have = existsSync(shipped) ? files(shipped) : [];
  const same = (f) => readFileSync(path.join(fresh, f)).equals(readFileSync(path.join(shipped, f)));
  stale = [
    ...want.filter((f) => !have.includes(f) || !same(f)),
    ...have.filter((f) => !want.includes(f)),
  ];
} finally {
  rmSync(out, { recursive: true, force: true });
}
if (stale.length > 0) {
  const listed = stale.slice(0, 5).join(", ") + (stale.length > 5 ? ", ..." : "");
  console.error(
    `check-dist: dist/src is not the build of src (${listed}): run \`npm run build\` in clients/node and commit dist/src`,
  );
  process.exit(1);
}
