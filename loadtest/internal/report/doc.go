// Package report is what a run leaves behind: the types of report.json (a
// Scenario per scenario run, with its verdict, faults, compare rows, bench
// figures and failover rows) and their writers, the text a person reads as
// the run goes, report.json and report.html with its charts and
// linearizability pictures. It writes; it judges nothing and runs nothing.
package report
