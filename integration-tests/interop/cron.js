// Next cron times as BullMQ Node computes them (npm cron-parser, the version
// bullmq depends on), for EchoMQ's cron equivalence tests.
// Usage: node cron.js < cases.json, where the JSON is an array of cases
//   { pattern, tz?, from, startDate?, endDate? }   (times in ms)
// Prints a JSON array: per case the next time in ms, null when cron-parser
// yields nothing (out of the time span), or { error } when it refuses the pattern.
'use strict';
const { CronExpressionParser } = require('cron-parser');

const cases = JSON.parse(require('fs').readFileSync(0, 'utf8') || '[]');
const out = cases.map((c) => {
  // The same currentDate rule as BullMQ's defaultRepeatStrategy.
  const from = new Date(c.from);
  const startDate = c.startDate != null ? new Date(c.startDate) : undefined;
  const currentDate = startDate && startDate > from ? startDate : from;
  const opts = { currentDate };
  if (c.tz) opts.tz = c.tz;
  if (startDate) opts.startDate = startDate;
  if (c.endDate != null) opts.endDate = new Date(c.endDate);
  let expr;
  try {
    expr = CronExpressionParser.parse(c.pattern, opts);
  } catch (e) {
    return { error: String(e && e.message) };
  }
  try {
    return expr.next().getTime();
  } catch (e) {
    return null;
  }
});
process.stdout.write(JSON.stringify(out) + '\n');
