// Loads the pinned MCP TypeScript SDK 2.x packages from where tests/interop/setup.sh
// installs them ($INTEROP_TOOLS/ts2/node_modules, default <repo>/target/interop-tools/ts2),
// not from a node_modules beside these scripts (there is none: the source tree stays clean).
//
// A bare `import '@modelcontextprotocol/server'` resolves relative to the importing file,
// so the scripts here ask this module instead: `await load('@modelcontextprotocol/server')`.
// It reads the package's `exports` map and imports the ESM entry (condition `import`, then
// `default`), so every package shares one module graph with the SDK's own imports (the
// SDK compares classes with `instanceof`: a CommonJS copy beside the ESM one would break it).
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));
export const TOOLS = process.env.INTEROP_TOOLS || resolve(HERE, '..', '..', '..', 'target', 'interop-tools');
export const MODULES = join(TOOLS, 'ts2', 'node_modules');

/** The file an `exports` entry names for an ESM import. */
function esmTarget(entry) {
    if (typeof entry === 'string') return entry;
    if (entry && typeof entry === 'object') {
        for (const condition of ['node', 'import', 'default']) {
            if (condition in entry) {
                const found = esmTarget(entry[condition]);
                if (found) return found;
            }
        }
    }
    return undefined;
}

/** `import(specifier)` as if this script lived inside $INTEROP_TOOLS/ts2. */
export async function load(specifier) {
    const parts = specifier.split('/');
    const name = specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0];
    const subpath = '.' + specifier.slice(name.length);
    const dir = join(MODULES, name);
    const manifest = join(dir, 'package.json');
    if (!existsSync(manifest)) {
        throw new Error(`${name} is not installed under ${MODULES} (run tests/interop/setup.sh)`);
    }
    const pkg = JSON.parse(readFileSync(manifest, 'utf8'));
    let entry;
    if (pkg.exports === undefined) entry = subpath === '.' ? pkg.module ?? pkg.main : subpath;
    else if (typeof pkg.exports === 'string' || !Object.keys(pkg.exports).some(key => key.startsWith('.')))
        entry = subpath === '.' ? esmTarget(pkg.exports) : undefined;
    else entry = esmTarget(pkg.exports[subpath]);
    if (!entry) throw new Error(`${name} exports no ESM entry for ${subpath}`);
    return import(pathToFileURL(join(dir, entry)).href);
}
