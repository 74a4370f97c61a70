package broker

// Classify exposes classify to the black-box table test.
var Classify = classify
