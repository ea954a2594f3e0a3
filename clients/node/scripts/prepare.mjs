// Compiles the package (TypeScript to dist/), first installing its
// development dependencies when they are missing. npm runs this as the
// `prepare` script, also when another project installs this folder
// (`npm install ./clients/node`), where npm does not install them itself.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const tsc = path.join(root, "node_modules", "typescript", "bin", "tsc");

function run(command, args) {
  const result = spawnSync(command, args, { cwd: root, stdio: "inherit" });
  if (result.error) throw result.error;
  if (result.status !== 0) process.exit(result.status ?? 1);
}

if (!existsSync(tsc)) {
  const npm = process.env.npm_execpath;
  // --ignore-scripts: this script is the package's only one; no recursion.
  const args = ["ci", "--no-audit", "--no-fund", "--ignore-scripts", "--include=dev"];
  if (npm && npm.endsWith(".js")) run(process.execPath, [npm, ...args]);
  else run("npm", args);
}
run(process.execPath, [tsc, "-p", "tsconfig.json"]);
