require('./.data/bench/dist/api/app.js');
const mods = Object.keys(require.cache);
const pk = {};
for (const m of mods) { const x = m.match(/node_modules\/((@[^/]+\/)?[^/]+)/); if (x) pk[x[1]] = (pk[x[1]]||0)+1; }
console.log(Object.entries(pk).sort((a,b)=>b[1]-a[1]).map(([k,v])=>k+':'+v).join(' '));
console.log('worker loaded?', mods.some(m=>m.includes('@temporalio/worker')));
require('./.data/bench/dist/api/server.js');
console.log('after server: worker loaded?', Object.keys(require.cache).some(m=>m.includes('@temporalio/worker')));
