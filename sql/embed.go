// Package sql holds the shop's schema as versioned plain-SQL migrations, one
// folder per dialect. File names are NNNN_name.sql; NNNN is the version.
package sql

import "embed"

// Migrations holds mysql/*.sql and sqlite/*.sql.
//
//go:embed mysql/*.sql sqlite/*.sql
var Migrations embed.FS
