// What a test job does, read from its data, so that a Node and a Rust worker
// given the same job behave the same (the Rust twin is `behave` in the tests):
//   {mode:'ok', ret}                    returns ret (absent: returns nothing)
//   {mode:'fail', reason}               throws Error(reason)
//   {mode:'fail-until', n, reason, ret} throws while attemptsMade < n, then returns ret
//   {mode:'unrecoverable', reason}      throws UnrecoverableError(reason)
//   {mode:'progress', p, ret}           updates progress to p, returns ret
//   {mode:'sleep', ms, ret}             waits ms, returns ret
'use strict';

async function behave(data, attemptsMade, updateProgress, UnrecoverableError) {
  const d = data || {};
  switch (d.mode) {
    case 'fail':
      throw new Error(d.reason);
    case 'fail-until':
      if (attemptsMade < d.n) throw new Error(d.reason);
      return d.ret;
    case 'unrecoverable':
      throw new UnrecoverableError(d.reason);
    case 'progress':
      await updateProgress(d.p);
      return d.ret;
    case 'sleep':
      await new Promise((r) => setTimeout(r, d.ms));
      return d.ret;
    default:
      return d.ret;
  }
}

module.exports = { behave };
