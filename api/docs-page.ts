/**
 * GET /docs: a self-contained reference page that renders /api/v1/openapi.json in the browser
 * (no external scripts, so it works offline and under a strict CSP).
 */
export const DOCS_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Sales CRM API reference</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
  body { font: 15px/1.5 system-ui, sans-serif; margin: 0; color: #1f2328; }
  header { background: #0d1117; color: #fff; padding: 16px 32px; }
  main { max-width: 1000px; margin: 0 auto; padding: 16px 32px 64px; }
  h2 { border-bottom: 1px solid #d0d7de; padding-bottom: 4px; margin-top: 40px; }
  .op { border: 1px solid #d0d7de; border-radius: 6px; margin: 12px 0; }
  .op summary { cursor: pointer; padding: 8px 12px; display: flex; gap: 12px; align-items: baseline; }
  .method { font: bold 12px monospace; text-transform: uppercase; padding: 2px 6px; border-radius: 4px; color: #fff; min-width: 52px; text-align: center; }
  .get { background: #1f6feb; } .post { background: #1a7f37; } .patch { background: #9a6700; } .put { background: #8250df; } .delete { background: #cf222e; }
  .path { font-family: monospace; font-weight: 600; }
  .body { padding: 0 16px 12px; }
  pre { background: #f6f8fa; padding: 8px; overflow: auto; font-size: 12px; }
  table { border-collapse: collapse; } td, th { border: 1px solid #d0d7de; padding: 4px 8px; text-align: left; vertical-align: top; }
</style>
</head>
<body>
<header><h1>Sales CRM API reference</h1><div id="info"></div></header>
<main id="root">Loading…</main>
<script>
const esc = (s) => String(s ?? '').replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' }[c]));
fetch('/api/v1/openapi.json').then((r) => r.json()).then((doc) => {
  document.getElementById('info').textContent = doc.info.description || '';
  const groups = {};
  for (const [path, ops] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(ops)) {
      const tag = (op.tags || ['Other'])[0];
      (groups[tag] = groups[tag] || []).push({ path, method, op });
    }
  }
  const root = document.getElementById('root');
  root.innerHTML = '';
  for (const [tag, items] of Object.entries(groups)) {
    const section = document.createElement('section');
    section.id = 'tag-' + tag.toLowerCase();
    section.innerHTML = '<h2>' + esc(tag) + '</h2>' + items.map(({ path, method, op }) => {
      const params = (op.parameters || []).map((p) => '<tr><td>' + esc(p.name) + '</td><td>' + esc(p.in) + '</td><td>' + esc(p.required ? 'yes' : 'no') + '</td><td><code>' + esc(JSON.stringify(p.schema)) + '</code></td></tr>').join('');
      const body = op.requestBody ? '<h4>Body</h4><pre>' + esc(JSON.stringify(op.requestBody.content['application/json'].schema, null, 2)) + '</pre>' : '';
      const responses = Object.entries(op.responses).map(([status, r]) => '<tr><td>' + esc(status) + '</td><td>' + esc(r.description) + '</td></tr>').join('');
      return '<details class="op" data-method="' + method + '" data-path="' + esc(path) + '"><summary><span class="method ' + method + '">' + method + '</span><span class="path">' + esc(path) + '</span><span>' + esc(op.summary) + '</span></summary><div class="body"><p>' + esc(op.description || '').replace(/\\n/g, '<br>') + '</p>' + (params ? '<h4>Parameters</h4><table><tr><th>name</th><th>in</th><th>required</th><th>schema</th></tr>' + params + '</table>' : '') + body + '<h4>Responses</h4><table>' + responses + '</table></div></details>';
    }).join('');
    root.appendChild(section);
  }
}).catch((e) => { document.getElementById('root').textContent = 'Could not load the API description: ' + e; });
</script>
</body>
</html>`;
