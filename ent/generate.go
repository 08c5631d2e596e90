package ent

//go:generate go tool ent generate --feature sql/lock,sql/modifier,sql/execquery ./schema
