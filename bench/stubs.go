package main

import "context"

func runWarm(ctx context.Context, e env) []Result    { return nil }
func runPlanner(ctx context.Context, e env) []Result { return nil }
func runMemory(ctx context.Context, e env) []Result  { return nil }
