// The npm packages a script drives: this folder's own (BullMQ 6.7.6), or, when
// the harness sets EMQ_NODE_PACKAGES to another pinned folder (../interop-6.7.0, ../interop-6.2),
// that folder's. One script text then runs against every BullMQ line tested.
'use strict';
const dir = process.env.EMQ_NODE_PACKAGES;
module.exports = (name) => require(dir ? require.resolve(name, { paths: [dir] }) : name);
