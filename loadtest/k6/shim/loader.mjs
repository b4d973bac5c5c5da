// Module hooks: 'k6', 'k6/http', 'k6/metrics' and 'k6/execution' resolve to
// the shim, and the scripts (plain .js with import syntax, which k6 reads as
// modules) load as ES modules.
const shim = {
  k6: './k6.mjs',
  'k6/http': './http.mjs',
  'k6/metrics': './metrics.mjs',
  'k6/execution': './execution.mjs',
};

export async function resolve(specifier, context, next) {
  if (Object.prototype.hasOwnProperty.call(shim, specifier)) {
    return { url: new URL(shim[specifier], import.meta.url).href, shortCircuit: true };
  }
  if (specifier.startsWith('k6/')) {
    throw new Error(`k6 shim: module ${specifier} is not shimmed (only ${Object.keys(shim).join(', ')})`);
  }
  return next(specifier, context);
}

export async function load(url, context, next) {
  if (url.startsWith('file:') && url.endsWith('.js')) {
    const r = await next(url, { ...context, format: 'module' });
    return { ...r, format: 'module', shortCircuit: true };
  }
  return next(url, context);
}
