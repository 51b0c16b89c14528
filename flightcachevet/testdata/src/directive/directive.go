package directive

func f() int {
	// want +1 `flightcachevet:ignore needs a reason \(//flightcachevet:ignore <why this is safe>\); without one it silences nothing`
	//flightcachevet:ignore
	x := 1
	// want +1 `flightcachevet:ignore needs a reason`
	//flightcachevet:ignore
	x++
	//flightcachevet:ignore the reason is here
	x++
	//flightcachevet:ignored is another word, not the directive
	return x
}
