//! When the next iteration of a scheduler is due.
//!
//! `every` slots are computed inside the scripts (H21), so that a Node and a
//! Rust worker cannot disagree on them; only cron times are computed here, and
//! they must equal what BullMQ Node computes with npm `cron-parser` (5.10) for
//! the same pattern, zone and reference time (docs/decisions.md §7 Cron): the time is part
//! of the iteration id, and two clients computing different times would both
//! create an iteration.
//!
//! croner parses the pattern and answers "does this value match"; the walk
//! from the reference time to the next match is cron-parser's own algorithm
//! over Luxon-style dates (see "the walk" below), because cron-parser's
//! answers around DST changes depend on the path its walk takes and croner's
//! search disagrees with them. A few syntax differences are bridged by
//! normalising the pattern first. Every bridge is listed in
//! `docs/job-scheduler.md` ("Cron equivalence") and covered by the
//! `cron_matches_cron_parser` table test, whose expected values come from
//! cron-parser itself.

use std::str::FromStr;

use chrono::{
    DateTime, Datelike, Local, Months, NaiveDate, NaiveDateTime, NaiveTime, Offset, TimeZone,
    Timelike, Utc,
};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};
use croner::{Cron, CronPattern, Weekday};

use super::error::SchedulerError;

/// The zone a cron pattern is evaluated in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CronZone {
    /// An IANA zone (`Europe/London`, `UTC`).
    Named(Tz),
    /// The process's local zone, as Node uses when a scheduler has no `tz`
    /// (`TZ`, else `/etc/localtime`).
    Local,
}

impl CronZone {
    /// Resolves a `tz` option: `None` is the local zone; names are IANA names
    /// in their canonical spelling.
    pub fn parse(tz: Option<&str>) -> Result<Self, SchedulerError> {
        match tz {
            None => Ok(CronZone::Local),
            Some(name) => Tz::from_str(name)
                .map(CronZone::Named)
                .map_err(|_| SchedulerError::InvalidTimeZone(name.to_owned())),
        }
    }
}

/// A parsed cron pattern with its zone.
#[derive(Clone, Debug)]
pub struct CronSchedule {
    cron: Cron,
    zone: CronZone,
}

impl CronSchedule {
    /// Parses `pattern` (5 fields, or 6 with seconds first) for zone `tz`.
    pub fn new(pattern: &str, tz: Option<&str>) -> Result<Self, SchedulerError> {
        let zone = CronZone::parse(tz)?;
        let normalised = normalise(pattern)?;
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            // cron-parser reads `0/10` as `0-59/10`.
            .sloppy_ranges(true)
            .build()
            .parse(&normalised)
            .map_err(|e| SchedulerError::InvalidPattern {
                pattern: pattern.to_owned(),
                reason: e.to_string(),
            })?;
        Ok(CronSchedule { cron, zone })
    }

    /// The first occurrence strictly after `after_ms`, or `None` when there is
    /// none (before `end_ms`, when given).
    ///
    /// This is BullMQ's `defaultRepeatStrategy`: the reference is
    /// `max(after_ms, start_ms)`, the result is strictly later than the
    /// reference (sub-second parts of the reference count as "later than the
    /// whole second"), and a result past `end_ms` means "no more iterations".
    pub fn next_after(
        &self,
        after_ms: i64,
        start_ms: Option<i64>,
        end_ms: Option<i64>,
    ) -> Option<i64> {
        let mut reference = after_ms.max(start_ms.unwrap_or(i64::MIN));
        // cron-parser clamps its current date into [startDate, endDate] first.
        if let Some(end) = end_ms {
            reference = reference.min(end);
        }
        self.search(reference, start_ms, end_ms)
    }

    fn search(&self, reference_ms: i64, start_ms: Option<i64>, end_ms: Option<i64>) -> Option<i64> {
        Walk::new(&self.cron.pattern, self.zone).next_after(reference_ms, start_ms, end_ms)
    }
}

/// Rewrites the syntax cron-parser accepts and croner reads differently.
fn normalise(pattern: &str) -> Result<String, SchedulerError> {
    let invalid = |reason: &str| SchedulerError::InvalidPattern {
        pattern: pattern.to_owned(),
        reason: reason.to_owned(),
    };
    let mut fields: Vec<String> = pattern.split_whitespace().map(str::to_owned).collect();
    if fields.is_empty() {
        return Err(invalid("empty pattern"));
    }
    if fields.len() == 1 && fields[0].starts_with('@') {
        return expand_nickname(&fields[0]).ok_or_else(|| invalid("unknown nickname"));
    }
    if !(5..=6).contains(&fields.len()) {
        // cron-parser pads shorter patterns with defaults; a 1–4 field pattern
        // is almost always a mistake, so EchoMQ refuses it instead.
        return Err(invalid("expected 5 fields, or 6 with seconds first"));
    }
    if fields.len() == 5 {
        fields.insert(0, "0".to_owned());
    }
    // Bridge: cron-parser treats `?` as `*` everywhere, and a `?` day field as a
    // wildcard for the day-of-month/day-of-week rule; croner counts only `*`.
    for f in &mut fields {
        if f == "?" {
            *f = "*".to_owned();
        }
    }
    if fields.iter().any(|f| f.contains('H') || f.contains('h')) {
        // cron-parser's `H` is a random value per parse in BullMQ (no seed), so
        // no two clients could agree on it.
        return Err(invalid("`H` (hashed) values are not supported"));
    }
    check_names(&fields).map_err(|reason| invalid(&reason))?;
    if fields[3].to_ascii_uppercase().contains('W') {
        // croner knows `15W` (nearest weekday); cron-parser refuses it, so a Node
        // worker could not schedule the successor of such an iteration.
        return Err(invalid("`W` (nearest weekday) is not supported"));
    }
    Ok(fields.join(" "))
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// cron-parser (5.10.4, pinned by BullMQ 6.7.6) resolves a name only in its
/// own field — month names in the month field, weekday names in the
/// day-of-week field — and refuses one anywhere else; croner resolves both
/// kinds in every field. A pattern croner alone accepts would be scheduled by
/// EchoMQ and refused by a Node worker taking one of its iterations, which
/// stops the scheduler in a mixed fleet. `fields` are the six, seconds first.
fn check_names(fields: &[String]) -> Result<(), String> {
    const FIELD: [&str; 6] = [
        "second",
        "minute",
        "hour",
        "day-of-month",
        "month",
        "day-of-week",
    ];
    for (i, field) in fields.iter().enumerate() {
        // Runs of three letters, left to right without overlap, as
        // cron-parser's `/[a-z]{3}/gi` finds them.
        let bytes = field.as_bytes();
        let mut at = 0;
        while at + 3 <= bytes.len() {
            let run = &bytes[at..at + 3];
            if !run.iter().all(u8::is_ascii_alphabetic) {
                at += 1;
                continue;
            }
            let name = String::from_utf8_lossy(run).to_ascii_lowercase();
            let known: &[&str] = match i {
                4 => &MONTHS,
                5 => &WEEKDAYS,
                _ => &[],
            };
            if !known.contains(&name.as_str()) {
                return Err(format!(
                    "`{name}` is not a name the {} field accepts (month names only in the month \
                     field, weekday names only in the day-of-week field)",
                    FIELD[i]
                ));
            }
            at += 3;
        }
    }
    Ok(())
}

/// cron-parser's predefined expressions (seconds first).
fn expand_nickname(nick: &str) -> Option<String> {
    let p = match nick.to_ascii_lowercase().as_str() {
        "@yearly" | "@annually" => "0 0 0 1 1 *",
        "@monthly" => "0 0 0 1 * *",
        "@weekly" => "0 0 0 * * 0",
        "@daily" => "0 0 0 * * *",
        "@hourly" => "0 0 * * * *",
        "@minutely" => "0 * * * * *",
        "@secondly" => "* * * * * *",
        "@weekdays" => "0 0 0 * * 1-5",
        "@weekends" => "0 0 0 * * 0,6",
        _ => return None,
    };
    Some(p.to_owned())
}

// ------------------------------------------------------------------ the walk
//
// croner parses the pattern and says which values match; the walk from the
// reference time to the next match is cron-parser's own (CronExpression's
// `findSchedule` over a Luxon date). Its answers around DST changes depend on
// the path the walk takes — which unit it stepped by when it crossed the
// change — so no rule applied to croner's own search reproduces them
// (docs/job-scheduler.md lists the cases). Only the forward direction exists.

/// cron-parser gives up after this many steps.
const LOOP_LIMIT: u32 = 10_000;

/// The walk starts within ±8·10¹⁵ ms (some 250,000 years) of the epoch, or
/// finds no occurrence: JS dates end at ±8.64·10¹⁵ and chrono's near
/// ±8.2·10¹⁵, so nothing either side computes lies beyond, and the walk's
/// steps (at most a month each) stay far from i64's ends. References that
/// far out come only from foreign `repeat` options (a `startDate` or a
/// `prevMillis` near 2⁶⁴, read `as i64`).
const MAX_MS: i64 = 8_000_000_000_000_000;

fn naive_of(ms: i64) -> NaiveDateTime {
    DateTime::from_timestamp_millis(ms)
        .unwrap_or(DateTime::<Utc>::UNIX_EPOCH)
        .naive_utc()
}

fn ms_of(naive: NaiveDateTime) -> i64 {
    naive.and_utc().timestamp_millis()
}

/// A Luxon DateTime: an instant plus the offset it is shown with. Its wall
/// clock is always `ts + offset`; the offset of a wall-clock time that was
/// *set* is resolved as Luxon's `fixOffset` does (the previous offset wins in a
/// repeated hour; a skipped time is read with the offset before the gap).
#[derive(Clone, Copy, Debug)]
struct LuxonDate {
    ts: i64,
    offset: i64,
    dst_start: Option<u32>,
    dst_start_landing: Option<u32>,
    dst_end: Option<u32>,
}

#[derive(Clone, Copy)]
enum Unit {
    Month,
    Day,
    Hour,
    Minute,
    Second,
}

struct Walk<'a> {
    pattern: &'a CronPattern,
    zone: CronZone,
    hours: Vec<u32>,
    minutes: Vec<u32>,
    seconds: Vec<u32>,
}

impl<'a> Walk<'a> {
    fn new(pattern: &'a CronPattern, zone: CronZone) -> Self {
        let values = |n: u32, f: &dyn Fn(u32) -> bool| (0..n).filter(|v| f(*v)).collect::<Vec<_>>();
        Walk {
            hours: values(24, &|h| pattern.hour_match(h).unwrap_or(false)),
            minutes: values(60, &|m| pattern.minute_match(m).unwrap_or(false)),
            seconds: values(60, &|s| pattern.second_match(s).unwrap_or(false)),
            pattern,
            zone,
        }
    }

    /// The zone's UTC offset at an instant, ms.
    fn offset_at(&self, ts: i64) -> i64 {
        let utc = naive_of(ts);
        let secs = match self.zone {
            CronZone::Named(tz) => tz.offset_from_utc_datetime(&utc).fix().local_minus_utc(),
            CronZone::Local => Local.offset_from_utc_datetime(&utc).local_minus_utc(),
        };
        i64::from(secs) * 1000
    }

    fn at(&self, ts: i64) -> LuxonDate {
        LuxonDate {
            ts,
            offset: self.offset_at(ts),
            dst_start: None,
            dst_start_landing: None,
            dst_end: None,
        }
    }

    fn wall(&self, d: &LuxonDate) -> NaiveDateTime {
        naive_of(d.ts + d.offset)
    }

    /// Luxon's `fixOffset`: the instant of a wall-clock time, guessing `guess`.
    fn fix_offset(&self, local: i64, guess: i64) -> (i64, i64) {
        let mut utc = local - guess;
        let o2 = self.offset_at(utc);
        if o2 == guess {
            return (utc, guess);
        }
        utc -= o2 - guess;
        let o3 = self.offset_at(utc);
        if o2 == o3 {
            return (utc, o2);
        }
        (local - o2.min(o3), o2.max(o3))
    }

    fn set_wall(&self, d: &mut LuxonDate, wall: NaiveDateTime) {
        let (ts, offset) = self.fix_offset(ms_of(wall), d.offset);
        d.ts = ts;
        d.offset = offset;
    }

    fn set_hms(
        &self,
        d: &mut LuxonDate,
        h: Option<u32>,
        m: Option<u32>,
        s: Option<u32>,
        ms: Option<u32>,
    ) {
        let w = self.wall(d);
        let time = NaiveTime::from_hms_milli_opt(
            h.unwrap_or(w.hour()),
            m.unwrap_or(w.minute()),
            s.unwrap_or(w.second()),
            ms.unwrap_or(w.nanosecond() / 1_000_000),
        )
        .unwrap_or(w.time());
        self.set_wall(d, w.date().and_time(time));
    }

    fn plus_ms(&self, d: &mut LuxonDate, ms: i64) {
        d.ts += ms;
        d.offset = self.offset_at(d.ts);
    }

    /// One step of `unit` forward, as CronDate's `addUnit`.
    fn add(&self, d: &mut LuxonDate, unit: Unit) {
        match unit {
            Unit::Month => {
                let w = self.wall(d);
                let first = w.date().with_day(1).unwrap_or(w.date());
                let next = first.checked_add_months(Months::new(1)).unwrap_or(first);
                let day = w.day().min(days_in_month(next.year(), next.month()));
                let moved = next.with_day(day).unwrap_or(next).and_time(w.time());
                self.set_wall(d, moved);
                // startOf('month')
                let w = self.wall(d);
                let start = w
                    .date()
                    .with_day(1)
                    .unwrap_or(w.date())
                    .and_time(NaiveTime::MIN);
                self.set_wall(d, start);
            }
            Unit::Day => {
                let w = self.wall(d);
                let moved = w.date().succ_opt().unwrap_or(w.date()).and_time(w.time());
                self.set_wall(d, moved);
                let w = self.wall(d);
                self.set_wall(d, w.date().and_time(NaiveTime::MIN));
            }
            Unit::Hour => {
                self.plus_ms(d, 3_600_000);
                self.set_hms(d, None, Some(0), Some(0), Some(0));
            }
            Unit::Minute => {
                self.plus_ms(d, 60_000);
                self.set_hms(d, None, None, Some(0), Some(0));
            }
            Unit::Second => self.plus_ms(d, 1_000),
        }
    }

    /// CronDate's `applyDateOperation` (forward): steps, and notes DST
    /// changes crossed by sub-day steps.
    fn apply(&self, d: &mut LuxonDate, unit: Unit) {
        if matches!(unit, Unit::Month | Unit::Day) {
            self.add(d, unit);
            return;
        }
        let prev_hour = self.wall(d).hour();
        let prev_offset = d.offset;
        self.add(d, unit);
        let w = self.wall(d);
        let hour = w.hour();
        let advance = (hour + 24 - prev_hour) % 24;
        let all_hours = self.hours.len() == 24;
        if d.offset > prev_offset && advance >= 2 {
            if !all_hours {
                d.dst_start = Some((prev_hour + 1) % 24);
                d.dst_start_landing = Some(hour);
            }
        } else if advance == 0 && w.minute() == 0 && w.second() == 0 && !all_hours {
            d.dst_end = Some(hour);
        }
    }

    fn is_dst_transition_day(&self, d: &LuxonDate) -> bool {
        let mut start = *d;
        let w = self.wall(&start);
        self.set_wall(&mut start, w.date().and_time(NaiveTime::MIN));
        // Luxon's endOf('day'): start of the next day, minus 1 ms.
        let mut next = *d;
        let w = self.wall(&next);
        self.set_wall(
            &mut next,
            w.date().succ_opt().unwrap_or(w.date()).and_time(w.time()),
        );
        let w = self.wall(&next);
        self.set_wall(&mut next, w.date().and_time(NaiveTime::MIN));
        start.offset != self.offset_at(next.ts - 1)
    }

    fn day_matches(&self, d: &LuxonDate) -> bool {
        let w = self.wall(d);
        let weekday = match w.weekday().num_days_from_sunday() {
            0 => Weekday::Sunday,
            1 => Weekday::Monday,
            2 => Weekday::Tuesday,
            3 => Weekday::Wednesday,
            4 => Weekday::Thursday,
            5 => Weekday::Friday,
            _ => Weekday::Saturday,
        };
        self.pattern
            .day_match(w.year(), w.month(), w.day(), weekday)
            .unwrap_or(false)
    }

    /// cron-parser's `#matchHour` (forward).
    fn match_hour(&self, d: &mut LuxonDate) -> bool {
        let hour = self.wall(d).hour();
        let is_match = self.hours.contains(&hour);
        if let (Some(skipped_from), Some(landing)) = (d.dst_start, d.dst_start_landing) {
            if landing == hour {
                // The clock jumped over hours the pattern wanted: run at the
                // hour it landed on.
                let mut skipped = skipped_from;
                while skipped != hour {
                    if self.hours.contains(&skipped) {
                        return true;
                    }
                    skipped = (skipped + 1) % 24;
                }
            }
        }
        if d.dst_end == Some(hour) {
            // The hour repeats: do not run its matches twice.
            d.dst_end = None;
            self.apply(d, Unit::Hour);
            return false;
        }
        if is_match {
            return true;
        }
        d.dst_start = None;
        d.dst_start_landing = None;
        let Some(next_hour) = self.hours.iter().copied().find(|h| *h > hour) else {
            self.apply(d, Unit::Day);
            return false;
        };
        if self.is_dst_transition_day(d) {
            for _ in 0..next_hour - hour {
                self.apply(d, Unit::Hour);
                if self.wall(d).hour() >= next_hour {
                    break;
                }
            }
        } else {
            self.set_hms(d, Some(next_hour), None, None, None);
        }
        self.set_hms(d, None, Some(self.minutes[0]), None, None);
        self.set_hms(d, None, None, Some(self.seconds[0]), None);
        false
    }

    fn next_after(&self, reference: i64, start: Option<i64>, end: Option<i64>) -> Option<i64> {
        if self.hours.is_empty() || self.minutes.is_empty() || self.seconds.is_empty() {
            return None;
        }
        let mut current = reference;
        if let Some(s) = start.filter(|s| current < *s) {
            current = s;
        } else if let Some(e) = end.filter(|e| current > *e) {
            current = e;
        }
        if !(-MAX_MS..=MAX_MS).contains(&current) {
            return None;
        }
        let mut d = self.at(current);
        let start_ts = d.ts;
        if self.wall(&d).nanosecond() / 1_000_000 > 0 {
            self.set_hms(&mut d, None, None, None, Some(0));
            self.apply(&mut d, Unit::Second);
        }
        for _ in 1..LOOP_LIMIT {
            if start.is_some_and(|s| d.ts < s) || end.is_some_and(|e| d.ts > e) {
                return None;
            }
            if !self.day_matches(&d) {
                self.apply(&mut d, Unit::Day);
                continue;
            }
            if !self
                .pattern
                .month_match(self.wall(&d).month())
                .unwrap_or(false)
            {
                self.apply(&mut d, Unit::Month);
                continue;
            }
            if !self.match_hour(&mut d) {
                continue;
            }
            let minute = self.wall(&d).minute();
            if !self.minutes.contains(&minute) {
                match self.minutes.iter().copied().find(|m| *m > minute) {
                    Some(m) => {
                        self.set_hms(&mut d, None, Some(m), None, None);
                        self.set_hms(&mut d, None, None, Some(self.seconds[0]), None);
                    }
                    None => {
                        self.apply(&mut d, Unit::Hour);
                        self.set_hms(&mut d, None, Some(self.minutes[0]), None, None);
                        self.set_hms(&mut d, None, None, Some(self.seconds[0]), None);
                    }
                }
                continue;
            }
            let second = self.wall(&d).second();
            if !self.seconds.contains(&second) {
                match self.seconds.iter().copied().find(|s| *s > second) {
                    Some(s) => self.set_hms(&mut d, None, None, Some(s), None),
                    None => {
                        self.apply(&mut d, Unit::Minute);
                        self.set_hms(&mut d, None, None, Some(self.seconds[0]), None);
                    }
                }
                continue;
            }
            if d.ts == start_ts {
                self.apply(&mut d, Unit::Second);
                continue;
            }
            return Some(d.ts);
        }
        None
    }
}

fn days_in_month(year: i32, month: u32) -> u32 {
    let first = NaiveDate::from_ymd_opt(year, month, 1);
    let next = first.and_then(|f| f.checked_add_months(Months::new(1)));
    match (first, next) {
        (Some(f), Some(n)) => (n - f).num_days() as u32,
        _ => 31,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn next(pattern: &str, tz: &str, after: i64) -> Option<i64> {
        CronSchedule::new(pattern, Some(tz))
            .unwrap()
            .next_after(after, None, None)
    }

    #[test]
    fn strictly_after_the_reference() {
        // 2024-01-01T00:00:00Z
        let t = 1_704_067_200_000;
        assert_eq!(next("0 * * * *", "UTC", t), Some(t + 3_600_000));
        assert_eq!(next("0 * * * *", "UTC", t - 1), Some(t));
        assert_eq!(next("* * * * * *", "UTC", t + 500), Some(t + 1000));
    }

    #[test]
    fn end_date_stops() {
        let s = CronSchedule::new("0 * * * *", Some("UTC")).unwrap();
        let t = 1_704_067_200_000;
        assert_eq!(s.next_after(t, None, Some(t + 1000)), None);
    }

    #[test]
    fn references_beyond_any_date_find_nothing() {
        let s = CronSchedule::new("0 * * * *", Some("America/New_York")).unwrap();
        for (after, start, end) in [
            (i64::MAX, None, None),
            (i64::MIN, None, None),
            (0, Some(i64::MAX), None),
            (0, Some(i64::MAX - 5), Some(i64::MAX)),
            (i64::MAX, None, Some(i64::MIN)),
            (MAX_MS + 1, None, None),
        ] {
            assert_eq!(
                s.next_after(after, start, end),
                None,
                "{after} {start:?} {end:?}"
            );
        }
        assert!(s.next_after(MAX_MS - 86_400_000, None, None).is_some());
        assert!(s.next_after(-MAX_MS, None, None).is_some());
    }

    #[test]
    fn bad_input_is_refused() {
        assert!(CronSchedule::new("61 * * * *", None).is_err());
        assert!(CronSchedule::new("* * *", None).is_err());
        assert!(CronSchedule::new("* * * * *", Some("Mars/Base")).is_err());
    }

    #[test]
    fn names_only_in_their_own_field_as_cron_parser_5_10_4() {
        for refused in [
            "0 0 * mon *",
            "0 0 * * jan",
            "0 0 * JAN-mon *",
            "0 0 * * MON-jan",
            "0 0 jan * * *",
            "0 mon * * * *",
            "0 0 * foo *",
        ] {
            match CronSchedule::new(refused, Some("UTC")) {
                Err(SchedulerError::InvalidPattern { pattern, reason }) => {
                    assert_eq!(pattern, refused);
                    assert!(reason.contains("field"), "{refused}: {reason}");
                }
                other => panic!("{refused} was not refused: {other:?}"),
            }
        }
        for accepted in [
            "0 0 * jan mon",
            "0 0 * JAN-MAR MON-FRI",
            "0 0 1 jan,jul *",
            "0 0 * * sun#2",
            "0 0 L * *",
            "@weekly",
        ] {
            assert!(
                CronSchedule::new(accepted, Some("UTC")).is_ok(),
                "{accepted}"
            );
        }
    }
}
