package filter

import (
	"fmt"
	"strings"

	"github.com/egridio/egrid/schemas/clip"
)

// Operator is an advanced filter's operatorType (eventgrid-behaviour.md §4.5). The zero value
// is not an operator.
type Operator uint8

// The advanced filter operators, in the order of eventgrid-behaviour.md §4.5.
const (
	NumberIn Operator = iota + 1
	NumberNotIn
	NumberLessThan
	NumberGreaterThan
	NumberLessThanOrEquals
	NumberGreaterThanOrEquals
	NumberInRange
	NumberNotInRange
	BoolEquals
	StringIn
	StringNotIn
	StringContains
	StringNotContains
	StringBeginsWith
	StringNotBeginsWith
	StringEndsWith
	StringNotEndsWith
	IsNullOrUndefined
	IsNotNull
)

// operand says what an operator compares with.
type operand uint8

const (
	operandNone    operand = iota // IsNullOrUndefined, IsNotNull
	operandNumber                 // one number in "value"
	operandBool                   // one bool in "value"
	operandNumbers                // numbers in "values"
	operandRanges                 // [lo, hi] pairs in "values"
	operandStrings                // strings in "values"
)

// opInfo is what Compile and Match need to know about an operator.
type opInfo struct {
	name    string
	operand operand
	// negated marks the Not forms: they hold when the positive form (base) holds for no
	// value of the key.
	negated bool
	base    Operator
	// matchesMissing is the result for a missing or null key (§4.5 missing-key list).
	matchesMissing bool
}

var operators = [...]opInfo{
	NumberIn:                  {name: "NumberIn", operand: operandNumbers},
	NumberNotIn:               {name: "NumberNotIn", operand: operandNumbers, negated: true, base: NumberIn, matchesMissing: true},
	NumberLessThan:            {name: "NumberLessThan", operand: operandNumber},
	NumberGreaterThan:         {name: "NumberGreaterThan", operand: operandNumber},
	NumberLessThanOrEquals:    {name: "NumberLessThanOrEquals", operand: operandNumber},
	NumberGreaterThanOrEquals: {name: "NumberGreaterThanOrEquals", operand: operandNumber},
	NumberInRange:             {name: "NumberInRange", operand: operandRanges},
	NumberNotInRange:          {name: "NumberNotInRange", operand: operandRanges, negated: true, base: NumberInRange, matchesMissing: true},
	BoolEquals:                {name: "BoolEquals", operand: operandBool},
	StringIn:                  {name: "StringIn", operand: operandStrings},
	StringNotIn:               {name: "StringNotIn", operand: operandStrings, negated: true, base: StringIn, matchesMissing: true},
	StringContains:            {name: "StringContains", operand: operandStrings},
	StringNotContains:         {name: "StringNotContains", operand: operandStrings, negated: true, base: StringContains},
	StringBeginsWith:          {name: "StringBeginsWith", operand: operandStrings},
	StringNotBeginsWith:       {name: "StringNotBeginsWith", operand: operandStrings, negated: true, base: StringBeginsWith},
	StringEndsWith:            {name: "StringEndsWith", operand: operandStrings},
	StringNotEndsWith:         {name: "StringNotEndsWith", operand: operandStrings, negated: true, base: StringEndsWith},
	IsNullOrUndefined:         {name: "IsNullOrUndefined", operand: operandNone, matchesMissing: true},
	IsNotNull:                 {name: "IsNotNull", operand: operandNone},
}

// String returns the operator's ARM name ("NumberIn").
func (o Operator) String() string {
	if o.valid() {
		return operators[o].name
	}
	return fmt.Sprintf("Operator(%d)", uint8(o))
}

func (o Operator) valid() bool { return o > 0 && int(o) < len(operators) }

func (o Operator) info() *opInfo { return &operators[o] }

// ParseOperator parses an operatorType, ignoring case as ARM does. The error wraps
// [ErrUnknownOperator] and lists the operators.
func ParseOperator(name string) (Operator, error) {
	for o := Operator(1); o.valid(); o++ {
		if strings.EqualFold(name, operators[o].name) {
			return o, nil
		}
	}
	if name == "" {
		return 0, fmt.Errorf("%w: operatorType is missing: set it to one of %s", ErrUnknownOperator, operatorList())
	}
	return 0, fmt.Errorf("%w %q: use one of %s", ErrUnknownOperator, clip.String(name), operatorList())
}

func operatorList() string {
	names := make([]string, 0, len(operators)-1)
	for o := Operator(1); o.valid(); o++ {
		names = append(names, operators[o].name)
	}
	return strings.Join(names, ", ")
}
