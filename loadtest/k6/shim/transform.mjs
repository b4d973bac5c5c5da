// Lets many VUs share one Node thread although k6 scripts are synchronous.
//
// Under k6 each VU runs on its own goroutine, so http.get() and sleep() may
// simply block. Here every VU lives in one thread, so a blocking call would
// stop all of them. Instead, each plain function of a script is rewritten into
// a generator, and each call inside it into a delegation that lets a
// suspending call (an HTTP request, a sleep) yield its promise up to the
// runner, which resumes the VU when the promise settles. Other VUs run
// meanwhile: hundreds of requests in flight at once, as under k6.
//
//   function f(a) { return g(a) + 1 }
//   ->
//   function f() { return __k6x(f, this, arguments, function* (a) { return (yield* __k6c(g, void 0, [a])) + 1 }) }
//
// A rewritten function called by the runner (or by another rewritten
// function) runs as a generator; called from code that cannot wait (a
// callback of Array.prototype.map, say), it runs straight through and throws
// if it needs to wait. Methods, getters, async functions and generators are
// left as they are, and so are the calls inside them.
import { Parser } from 'acorn';

/**
 * @param {string} src an ES module's source
 * @returns {string} the same module with its plain functions made suspendable
 */
export function transform(src) {
  const ast = Parser.parse(src, { ecmaVersion: 2022, sourceType: 'module' });
  /** @type {{pos: number, end: number, text: string, seq: number}[]} */
  const edits = [];
  let seq = 0;
  const replace = (pos, end, text) => edits.push({ pos, end, text, seq: seq++ });
  const insert = (pos, text) => replace(pos, pos, text);
  const params = (start, end) => src.slice(src.indexOf('(', start) + 1, src.lastIndexOf(')', end));

  /**
   * @param {any} node
   * @param {boolean} suspendable whether `yield` may be written here
   * @param {any} parent
   */
  function walk(node, suspendable, parent) {
    if (!node || typeof node.type !== 'string') return;
    switch (node.type) {
      case 'FunctionDeclaration':
      case 'FunctionExpression':
      case 'ArrowFunctionExpression': {
        const method = parent && ((parent.type === 'Property' && (parent.method || parent.kind !== 'init')) || parent.type === 'MethodDefinition');
        if (node.async || node.generator || method) {
          for (const p of node.params) walk(p, false, node);
          walk(node.body, false, node);
          return;
        }
        for (const p of node.params) walk(p, false, node);
        rewriteFunction(node);
        walk(node.body, true, node);
        return;
      }
      case 'CallExpression': {
        const callee = node.callee;
        if (suspendable && !node.optional && callee.type !== 'Super' && !(callee.type === 'MemberExpression' && (callee.optional || callee.object.type === 'Super'))) {
          rewriteCall(node);
        }
        break;
      }
      case 'ClassBody':
        for (const m of node.body) walk(m, false, node);
        return;
      default:
    }
    for (const key of Object.keys(node)) {
      if (key === 'type' || key === 'start' || key === 'end') continue;
      const v = node[key];
      if (Array.isArray(v)) for (const c of v) walk(c, suspendable, node);
      else if (v && typeof v.type === 'string') walk(v, suspendable, node);
    }
  }

  /** @param {any} node */
  function rewriteFunction(node) {
    const bodyOpen = node.body.start;
    if (node.type === 'FunctionDeclaration' && node.id) {
      const name = node.id.name;
      replace(node.id.end, bodyOpen + 1, `() { return __k6x(${name}, this, arguments, function* (${params(node.id.end, bodyOpen)}) {`);
      insert(node.end, '); }');
      return;
    }
    if (node.type !== 'ArrowFunctionExpression') {
      // An anonymous `export default function`, or a function expression.
      replace(node.start, bodyOpen + 1, `__k6w(function* (${params(node.start, bodyOpen)}) {`);
      insert(node.end, ')');
      return;
    }
    const arrow = src.lastIndexOf('=>', node.body.start);
    let ps = src.slice(node.start, arrow).trim();
    if (!ps.startsWith('(')) ps = `(${ps})`;
    if (node.expression) {
      // `return (`: the body may start on the next line, where a bare return would end.
      replace(node.start, arrow + 2, `__k6w(function* ${ps} { return (`);
      insert(node.end, '); }.bind(this))');
    } else {
      replace(node.start, node.body.start, `__k6w(function* ${ps} `);
      insert(node.end, '.bind(this))');
    }
  }

  /** @param {any} node */
  function rewriteCall(node) {
    const callee = node.callee;
    const open = src.indexOf('(', callee.end);
    insert(node.start, '(yield* ');
    // Positions come from the tokens, not the object's end: the object may be
    // in parentheses, `(a || b).c()`, and those must stay.
    if (callee.type === 'MemberExpression' && !callee.computed) {
      insert(node.start, '__k6m(');
      replace(src.lastIndexOf('.', callee.property.start), open + 1, `, ${JSON.stringify(callee.property.name)}, [`);
    } else if (callee.type === 'MemberExpression') {
      insert(node.start, '__k6m(');
      replace(src.lastIndexOf('[', callee.property.start), src.lastIndexOf('[', callee.property.start) + 1, ', ');
      replace(src.indexOf(']', callee.property.end), open + 1, ', [');
    } else {
      insert(node.start, '__k6c(');
      replace(open, open + 1, ', void 0, [');
    }
    replace(node.end - 1, node.end, ']))');
  }

  walk(ast, false, null);
  // Apply from the end. At one position a replacement goes first, so that
  // the inserts land before its text, outer inserts before inner ones.
  edits.sort((a, b) => b.pos - a.pos || (b.end - b.pos) - (a.end - a.pos) || b.seq - a.seq);
  let out = src;
  for (const e of edits) out = out.slice(0, e.pos) + e.text + out.slice(e.end);
  return out;
}
