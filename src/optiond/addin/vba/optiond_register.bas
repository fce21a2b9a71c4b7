Attribute VB_Name = "optiond_register"
' Generated from optiond.addin.table - do not edit; regenerate with
'     python -m optiond.addin.generate --write-vba
Option Explicit

Public Sub OptiondRegisterFunctions()
    On Error Resume Next
    Application.MacroOptions Macro:="'" & ThisWorkbook.Name & "'!BOPM_PUT", _
        Description:="Put price on a Cox-Ross-Rubinstein binomial tree with N steps, American (default) or European, with a continuous dividend yield and optional cash dividends (div_times, div_amounts). Ranges in any argument return a range of prices.", _
        Category:="optiond", _
        ArgumentDescriptions:=Array( _
            "Spot price of the underlying (> 0). A cell or a range: ranges broadcast against the other arguments and return a range of the same shape.", _
            "Strike price (> 0), in the currency of S. A column of strikes returns a column of results.", _
            "Time to expiry in years (> 0), e.g. 0.25 for three months (ACT/365), or the expiry date (a date cell, or a number >= 1000: an Excel date; its 16:00 New York close), T then counting in minutes/525,600 from valuation. Over 50 years: refused as days.", _
            "Risk-free rate, annual and continuously compounded, as a decimal (0.05 = 5%; above 1 is refused as percent); or a curve's handle (OPTIOND_CURVE): each option's r is the curve's zero rate at its T.", _
            "Volatility, annualised, as a decimal (0.2 = 20%); > 0 and <= 10 (above 5 is refused as vol points). Or a surface's handle (SURFACE_FIT): each option's volatility is the surface's at its K and T.", _
            "Steps of the binomial tree, a whole number from 1 to 10,000,000. More steps: more accurate and slower (time grows as N squared); 200 to 2000 is typical.", _
            "Optional. Continuous dividend yield, annual, as a decimal (0.02 = 2%; over 1: refused as %); default 0. Or a cash-dividend schedule's handle (OPTIOND_DIVIDENDS): each option gets its dividends from now to its T, on the CRR tree.", _
            "Optional. TRUE for American exercise (the default), FALSE for European.", _
            "Optional. Cash-dividend ex-dates in years from now (0.25 = in three months), ascending, before T: a row or column of up to 8 cells (blanks pad), one schedule for every option of the call. With div_amounts; spot model on the CRR tree.", _
            "Optional. The cash dividend of each div_times ex-date, in the currency of S (>= 0; together below S): a row or column of up to 8 cells in the order of div_times. Spot model on the CRR tree: S drops by the amount at each ex-date.", _
            "Optional. TRUE for the converged tree value (BBSR: Broadie-Detemple smoothing of the last step, Richardson extrapolation over N and N/2 steps; 1.5 trees' work); FALSE (the default) for the plain tree. Not with cash dividends.", _
            "Optional. For a date T: when to value, a date (its 16:00 New York close) or a date and time (New York). Empty: now, to the minute. Must come before the expiry. Not used with a year-fraction T.")
    Application.MacroOptions Macro:="'" & ThisWorkbook.Name & "'!BOPM_CALL", _
        Description:="Call price on a Cox-Ross-Rubinstein binomial tree with N steps, American (default) or European, with a continuous dividend yield and optional cash dividends (div_times, div_amounts). Ranges in any argument return a range of prices.", _
        Category:="optiond", _
        ArgumentDescriptions:=Array( _
            "Spot price of the underlying (> 0). A cell or a range: ranges broadcast against the other arguments and return a range of the same shape.", _
            "Strike price (> 0), in the currency of S. A column of strikes returns a column of results.", _
            "Time to expiry in years (> 0), e.g. 0.25 for three months (ACT/365), or the expiry date (a date cell, or a number >= 1000: an Excel date; its 16:00 New York close), T then counting in minutes/525,600 from valuation. Over 50 years: refused as days.", _
            "Risk-free rate, annual and continuously compounded, as a decimal (0.05 = 5%; above 1 is refused as percent); or a curve's handle (OPTIOND_CURVE): each option's r is the curve's zero rate at its T.", _
            "Volatility, annualised, as a decimal (0.2 = 20%); > 0 and <= 10 (above 5 is refused as vol points). Or a surface's handle (SURFACE_FIT): each option's volatility is the surface's at its K and T.", _
            "Steps of the binomial tree, a whole number from 1 to 10,000,000. More steps: more accurate and slower (time grows as N squared); 200 to 2000 is typical.", _
            "Optional. Continuous dividend yield, annual, as a decimal (0.02 = 2%; over 1: refused as %); default 0. Or a cash-dividend schedule's handle (OPTIOND_DIVIDENDS): each option gets its dividends from now to its T, on the CRR tree.", _
            "Optional. TRUE for American exercise (the default), FALSE for European.", _
            "Optional. Cash-dividend ex-dates in years from now (0.25 = in three months), ascending, before T: a row or column of up to 8 cells (blanks pad), one schedule for every option of the call. With div_amounts; spot model on the CRR tree.", _
            "Optional. The cash dividend of each div_times ex-date, in the currency of S (>= 0; together below S): a row or column of up to 8 cells in the order of div_times. Spot model on the CRR tree: S drops by the amount at each ex-date.", _
            "Optional. TRUE for the converged tree value (BBSR: Broadie-Detemple smoothing of the last step, Richardson extrapolation over N and N/2 steps; 1.5 trees' work); FALSE (the default) for the plain tree. Not with cash dividends.", _
            "Optional. For a date T: when to value, a date (its 16:00 New York close) or a date and time (New York). Empty: now, to the minute. Must come before the expiry. Not used with a year-fraction T.")
    Application.MacroOptions Macro:="'" & ThisWorkbook.Name & "'!BS_PUT", _
        Description:="Black-Scholes-Merton price of a European put with a continuous dividend yield (closed form). Ranges in any argument return a range of prices.", _
        Category:="optiond", _
        ArgumentDescriptions:=Array( _
            "Spot price of the underlying (> 0). A cell or a range: ranges broadcast against the other arguments and return a range of the same shape.", _
            "Strike price (> 0), in the currency of S. A column of strikes returns a column of results.", _
            "Time to expiry in years (> 0), e.g. 0.25 for three months (ACT/365), or the expiry date (a date cell, or a number >= 1000: an Excel date; its 16:00 New York close), T then counting in minutes/525,600 from valuation. Over 50 years: refused as days.", _
            "Risk-free rate, annual and continuously compounded, as a decimal (0.05 = 5%; above 1 is refused as percent); or a curve's handle (OPTIOND_CURVE): each option's r is the curve's zero rate at its T.", _
            "Volatility, annualised, as a decimal (0.2 = 20%); > 0 and <= 10 (above 5 is refused as vol points). Or a surface's handle (SURFACE_FIT): each option's volatility is the surface's at its K and T.", _
            "Optional. Continuous dividend yield, annual, as a decimal (0.02 = 2%; above 1 is refused as percent); default 0.", _
            "Optional. For a date T: when to value, a date (its 16:00 New York close) or a date and time (New York). Empty: now, to the minute. Must come before the expiry. Not used with a year-fraction T.")
    Application.MacroOptions Macro:="'" & ThisWorkbook.Name & "'!BS_CALL", _
        Description:="Black-Scholes-Merton price of a European call with a continuous dividend yield (closed form). Ranges in any argument return a range of prices.", _
        Category:="optiond", _
        ArgumentDescriptions:=Array( _
            "Spot price of the underlying (> 0). A cell or a range: ranges broadcast against the other arguments and return a range of the same shape.", _
            "Strike price (> 0), in the currency of S. A column of strikes returns a column of results.", _
            "Time to expiry in years (> 0), e.g. 0.25 for three months (ACT/365), or the expiry date (a date cell, or a number >= 1000: an Excel date; its 16:00 New York close), T then counting in minutes/525,600 from valuation. Over 50 years: refused as days.", _
            "Risk-free rate, annual and continuously compounded, as a decimal (0.05 = 5%; above 1 is refused as percent); or a curve's handle (OPTIOND_CURVE): each option's r is the curve's zero rate at its T.", _
            "Volatility, annualised, as a decimal (0.2 = 20%); > 0 and <= 10 (above 5 is refused as vol points). Or a surface's handle (SURFACE_FIT): each option's volatility is the surface's at its K and T.", _
            "Optional. Continuous dividend yield, annual, as a decimal (0.02 = 2%; above 1 is refused as percent); default 0.", _
            "Optional. For a date T: when to value, a date (its 16:00 New York close) or a date and time (New York). Empty: now, to the minute. Must come before the expiry. Not used with a year-fraction T.")
    Application.MacroOptions Macro:="'" & ThisWorkbook.Name & "'!BS_IV", _
        Description:="Implied volatility of a European option from its price, on the Black-Scholes-Merton closed form with a continuous dividend yield (Newton on the normalised price, after Jaeckel's Let's be rational; to the last bits). Returns an annualised decimal.", _
        Category:="optiond", _
        ArgumentDescriptions:=Array( _
            "Market price of the option (> 0), in the currency of S. A cell or a range.", _
            "Spot price of the underlying (> 0). A cell or a range: ranges broadcast against the other arguments and return a range of the same shape.", _
            "Strike price (> 0), in the currency of S. A column of strikes returns a column of results.", _
            "Time to expiry in years (> 0), e.g. 0.25 for three months (ACT/365), or the expiry date (a date cell, or a number >= 1000: an Excel date; its 16:00 New York close), T then counting in minutes/525,600 from valuation. Over 50 years: refused as days.", _
            "Risk-free rate, annual and continuously compounded, as a decimal (0.05 = 5%; above 1 is refused as percent); or a curve's handle (OPTIOND_CURVE): each option's r is the curve's zero rate at its T.", _
            "Optional. Continuous dividend yield, annual, as a decimal (0.02 = 2%; above 1 is refused as percent); default 0.", _
            "Optional. ""call"" or ""put"": the kind of the option whose price is given. Omitted or empty: ""call"" (give ""put"" for a put's price).", _
            "Optional. For a date T: when to value, a date (its 16:00 New York close) or a date and time (New York). Empty: now, to the minute. Must come before the expiry. Not used with a year-fraction T.")
    Application.MacroOptions Macro:="'" & ThisWorkbook.Name & "'!BS_GREEKS", _
        Description:="Black-Scholes-Merton Greeks of a European option (closed form), one row per option: delta, gamma, theta, vega, rho, dividend rho, in raw (per year, per 1.00; the default) or trader units (per day, vol point, 1%); optional header row.", _
        Category:="optiond", _
        ArgumentDescriptions:=Array( _
            "Spot price of the underlying (> 0). A cell or a range: ranges broadcast against the other arguments and return a range of the same shape.", _
            "Strike price (> 0), in the currency of S. A column of strikes returns a column of results.", _
            "Time to expiry in years (> 0), e.g. 0.25 for three months (ACT/365), or the expiry date (a date cell, or a number >= 1000: an Excel date; its 16:00 New York close), T then counting in minutes/525,600 from valuation. Over 50 years: refused as days.", _
            "Risk-free rate, annual and continuously compounded, as a decimal (0.05 = 5%; above 1 is refused as percent); or a curve's handle (OPTIOND_CURVE): each option's r is the curve's zero rate at its T.", _
            "Volatility, annualised, as a decimal (0.2 = 20%); > 0 and <= 10 (above 5 is refused as vol points). Or a surface's handle (SURFACE_FIT): each option's volatility is the surface's at its K and T.", _
            "Optional. Continuous dividend yield, annual, as a decimal (0.02 = 2%; above 1 is refused as percent); default 0.", _
            "Optional. ""call"" (the default) or ""put"".", _
            "Optional. For a date T: when to value, a date (its 16:00 New York close) or a date and time (New York). Empty: now, to the minute. Must come before the expiry. Not used with a year-fraction T.", _
            "Optional. ""raw"" (the default: theta per year, vega per 1.00 of volatility, rho and dividend rho per 1.00 of rate or yield) or ""trader"" (theta per calendar day, vega per volatility point, rho and dividend rho per 1%).", _
            "Optional. TRUE for a first row naming each column with its unit; FALSE (the default) for the Greeks alone.")
    Application.MacroOptions Macro:="'" & ThisWorkbook.Name & "'!BOPM_IV", _
        Description:="Implied volatility of an option from its price, by a bracketed root find on the binomial tree price (American by default), optional cash dividends. Returns an annualised decimal (0.2 = 20%).", _
        Category:="optiond", _
        ArgumentDescriptions:=Array( _
            "Market price of the option (> 0), in the currency of S. A cell or a range.", _
            "Spot price of the underlying (> 0). A cell or a range: ranges broadcast against the other arguments and return a range of the same shape.", _
            "Strike price (> 0), in the currency of S. A column of strikes returns a column of results.", _
            "Time to expiry in years (> 0), e.g. 0.25 for three months (ACT/365), or the expiry date (a date cell, or a number >= 1000: an Excel date; its 16:00 New York close), T then counting in minutes/525,600 from valuation. Over 50 years: refused as days.", _
            "Risk-free rate, annual and continuously compounded, as a decimal (0.05 = 5%; above 1 is refused as percent); or a curve's handle (OPTIOND_CURVE): each option's r is the curve's zero rate at its T.", _
            "Optional. Continuous dividend yield, annual, as a decimal (0.02 = 2%; over 1: refused as %); default 0. Or a cash-dividend schedule's handle (OPTIOND_DIVIDENDS): each option gets its dividends from now to its T, on the CRR tree.", _
            "Optional. ""call"" or ""put"": the kind of the option whose price is given. Omitted or empty: ""call"" (give ""put"" for a put's price).", _
            "Optional. Steps of the binomial tree, 1 to 10,000,000; default 1000. Time grows as N squared.", _
            "Optional. TRUE for American exercise (the default), FALSE for European.", _
            "Optional. Cash-dividend ex-dates in years from now (0.25 = in three months), ascending, before T: a row or column of up to 8 cells (blanks pad), one schedule for every option of the call. With div_amounts; spot model on the CRR tree.", _
            "Optional. The cash dividend of each div_times ex-date, in the currency of S (>= 0; together below S): a row or column of up to 8 cells in the order of div_times. Spot model on the CRR tree: S drops by the amount at each ex-date.", _
            "Optional. TRUE for the converged tree value (BBSR: Broadie-Detemple smoothing of the last step, Richardson extrapolation over N and N/2 steps; 1.5 trees' work); FALSE (the default) for the plain tree. Not with cash dividends.", _
            "Optional. For a date T: when to value, a date (its 16:00 New York close) or a date and time (New York). Empty: now, to the minute. Must come before the expiry. Not used with a year-fraction T.")
    Application.MacroOptions Macro:="'" & ThisWorkbook.Name & "'!BOPM_GREEKS", _
        Description:="Greeks from a binomial tree, one row per option: delta, gamma, theta, vega, rho, dividend rho, in raw (per year, per 1.00; the default) or trader units (per day, vol point, 1%); optional cash dividends and a header row.", _
        Category:="optiond", _
        ArgumentDescriptions:=Array( _
            "Spot price of the underlying (> 0). A cell or a range: ranges broadcast against the other arguments and return a range of the same shape.", _
            "Strike price (> 0), in the currency of S. A column of strikes returns a column of results.", _
            "Time to expiry in years (> 0), e.g. 0.25 for three months (ACT/365), or the expiry date (a date cell, or a number >= 1000: an Excel date; its 16:00 New York close), T then counting in minutes/525,600 from valuation. Over 50 years: refused as days.", _
            "Risk-free rate, annual and continuously compounded, as a decimal (0.05 = 5%; above 1 is refused as percent); or a curve's handle (OPTIOND_CURVE): each option's r is the curve's zero rate at its T.", _
            "Volatility, annualised, as a decimal (0.2 = 20%); > 0 and <= 10 (above 5 is refused as vol points). Or a surface's handle (SURFACE_FIT): each option's volatility is the surface's at its K and T.", _
            "Steps of the binomial tree, a whole number from 1 to 10,000,000. More steps: more accurate and slower (time grows as N squared); 200 to 2000 is typical.", _
            "Optional. Continuous dividend yield, annual, as a decimal (0.02 = 2%; over 1: refused as %); default 0. Or a cash-dividend schedule's handle (OPTIOND_DIVIDENDS): each option gets its dividends from now to its T, on the CRR tree.", _
            "Optional. ""call"" (the default) or ""put"".", _
            "Optional. TRUE for American exercise (the default), FALSE for European.", _
            "Optional. Cash-dividend ex-dates in years from now (0.25 = in three months), ascending, before T: a row or column of up to 8 cells (blanks pad), one schedule for every option of the call. With div_amounts; spot model on the CRR tree.", _
            "Optional. The cash dividend of each div_times ex-date, in the currency of S (>= 0; together below S): a row or column of up to 8 cells in the order of div_times. Spot model on the CRR tree: S drops by the amount at each ex-date.", _
            "Optional. TRUE for the converged tree value (BBSR: Broadie-Detemple smoothing of the last step, Richardson extrapolation over N and N/2 steps; 1.5 trees' work); FALSE (the default) for the plain tree. Not with cash dividends.", _
            "Optional. For a date T: when to value, a date (its 16:00 New York close) or a date and time (New York). Empty: now, to the minute. Must come before the expiry. Not used with a year-fraction T.", _
            "Optional. ""raw"" (the default: theta per year, vega per 1.00 of volatility, rho and dividend rho per 1.00 of rate or yield) or ""trader"" (theta per calendar day, vega per volatility point, rho and dividend rho per 1%).", _
            "Optional. TRUE for a first row naming each column with its unit; FALSE (the default) for the Greeks alone.")
    Application.MacroOptions Macro:="'" & ThisWorkbook.Name & "'!AMERICAN_PUT", _
        Description:="American put price by the spectral method of Andersen, Lake & Offengenden (2016): the exercise boundary by fixed-point iteration on Chebyshev nodes. Continuous dividend yield. Ranges in any argument return a range of prices.", _
        Category:="optiond", _
        ArgumentDescriptions:=Array( _
            "Spot price of the underlying (> 0). A cell or a range: ranges broadcast against the other arguments and return a range of the same shape.", _
            "Strike price (> 0), in the currency of S. A column of strikes returns a column of results.", _
            "Time to expiry in years (> 0), e.g. 0.25 for three months (ACT/365), or the expiry date (a date cell, or a number >= 1000: an Excel date; its 16:00 New York close), T then counting in minutes/525,600 from valuation. Over 50 years: refused as days.", _
            "Risk-free rate, annual and continuously compounded, as a decimal (0.05 = 5%; above 1 is refused as percent); or a curve's handle (OPTIOND_CURVE): each option's r is the curve's zero rate at its T.", _
            "Volatility, annualised, as a decimal (0.2 = 20%); > 0 and <= 10 (above 5 is refused as vol points). Or a surface's handle (SURFACE_FIT): each option's volatility is the surface's at its K and T.", _
            "Optional. Continuous dividend yield, annual, as a decimal (0.02 = 2%; over 1: refused as %); default 0. Or a cash-dividend schedule's handle (OPTIOND_DIVIDENDS): each option gets its dividends from now to its T, on the CRR tree.", _
            "Optional. Spectral setting and its worst price error measured against QuantLib's QdFp high precision (strike 100): ""fast"" 6.9e-06, ""accurate"" 1e-07, ""high-precision"" 2.7e-09; default ""accurate"". Faster settings are coarser.", _
            "Optional. For a date T: when to value, a date (its 16:00 New York close) or a date and time (New York). Empty: now, to the minute. Must come before the expiry. Not used with a year-fraction T.")
    Application.MacroOptions Macro:="'" & ThisWorkbook.Name & "'!AMERICAN_CALL", _
        Description:="American call price by the spectral method of Andersen, Lake & Offengenden (2016): the exercise boundary by fixed-point iteration on Chebyshev nodes. Continuous dividend yield. Ranges in any argument return a range of prices.", _
        Category:="optiond", _
        ArgumentDescriptions:=Array( _
            "Spot price of the underlying (> 0). A cell or a range: ranges broadcast against the other arguments and return a range of the same shape.", _
            "Strike price (> 0), in the currency of S. A column of strikes returns a column of results.", _
            "Time to expiry in years (> 0), e.g. 0.25 for three months (ACT/365), or the expiry date (a date cell, or a number >= 1000: an Excel date; its 16:00 New York close), T then counting in minutes/525,600 from valuation. Over 50 years: refused as days.", _
            "Risk-free rate, annual and continuously compounded, as a decimal (0.05 = 5%; above 1 is refused as percent); or a curve's handle (OPTIOND_CURVE): each option's r is the curve's zero rate at its T.", _
            "Volatility, annualised, as a decimal (0.2 = 20%); > 0 and <= 10 (above 5 is refused as vol points). Or a surface's handle (SURFACE_FIT): each option's volatility is the surface's at its K and T.", _
            "Optional. Continuous dividend yield, annual, as a decimal (0.02 = 2%; over 1: refused as %); default 0. Or a cash-dividend schedule's handle (OPTIOND_DIVIDENDS): each option gets its dividends from now to its T, on the CRR tree.", _
            "Optional. Spectral setting and its worst price error measured against QuantLib's QdFp high precision (strike 100): ""fast"" 6.9e-06, ""accurate"" 1e-07, ""high-precision"" 2.7e-09; default ""accurate"". Faster settings are coarser.", _
            "Optional. For a date T: when to value, a date (its 16:00 New York close) or a date and time (New York). Empty: now, to the minute. Must come before the expiry. Not used with a year-fraction T.")
    Application.MacroOptions Macro:="'" & ThisWorkbook.Name & "'!AMERICAN_IV", _
        Description:="Implied volatility of an American option from its price, on the spectral price of Andersen, Lake & Offengenden (2016) (Newton with bisection). Returns an annualised decimal (0.2 = 20%).", _
        Category:="optiond", _
        ArgumentDescriptions:=Array( _
            "Market price of the option (> 0), in the currency of S. A cell or a range.", _
            "Spot price of the underlying (> 0). A cell or a range: ranges broadcast against the other arguments and return a range of the same shape.", _
            "Strike price (> 0), in the currency of S. A column of strikes returns a column of results.", _
            "Time to expiry in years (> 0), e.g. 0.25 for three months (ACT/365), or the expiry date (a date cell, or a number >= 1000: an Excel date; its 16:00 New York close), T then counting in minutes/525,600 from valuation. Over 50 years: refused as days.", _
            "Risk-free rate, annual and continuously compounded, as a decimal (0.05 = 5%; above 1 is refused as percent); or a curve's handle (OPTIOND_CURVE): each option's r is the curve's zero rate at its T.", _
            "Optional. Continuous dividend yield, annual, as a decimal (0.02 = 2%; over 1: refused as %); default 0. Or a cash-dividend schedule's handle (OPTIOND_DIVIDENDS): each option gets its dividends from now to its T, on the CRR tree.", _
            "Optional. ""call"" or ""put"": the kind of the option whose price is given. Omitted or empty: ""call"" (give ""put"" for a put's price).", _
            "Optional. Spectral setting and its worst price error measured against QuantLib's QdFp high precision (strike 100): ""fast"" 6.9e-06, ""accurate"" 1e-07, ""high-precision"" 2.7e-09; default ""accurate"". Faster settings are coarser.", _
            "Optional. For a date T: when to value, a date (its 16:00 New York close) or a date and time (New York). Empty: now, to the minute. Must come before the expiry. Not used with a year-fraction T.")
    Application.MacroOptions Macro:="'" & ThisWorkbook.Name & "'!MLMC_CALL", _
        Description:="European call by adaptive multilevel Monte Carlo (Giles; Milstein scheme, Black-Scholes dynamics) to a target RMS error eps. The same seed gives the same price. Its standard error: MLMC_STDERR.", _
        Category:="optiond", _
        ArgumentDescriptions:=Array( _
            "Spot price of the underlying (> 0). A cell or a range: ranges broadcast against the other arguments and return a range of the same shape.", _
            "Strike price (> 0), in the currency of S. A column of strikes returns a column of results.", _
            "Time to expiry in years (> 0), e.g. 0.25 for three months (ACT/365), or the expiry date (a date cell, or a number >= 1000: an Excel date; its 16:00 New York close), T then counting in minutes/525,600 from valuation. Over 50 years: refused as days.", _
            "Risk-free rate, annual and continuously compounded, as a decimal (0.05 = 5%; above 1 is refused as percent); or a curve's handle (OPTIOND_CURVE): each option's r is the curve's zero rate at its T.", _
            "Volatility, annualised, as a decimal (0.2 = 20%); > 0 and <= 5.", _
            "Target accuracy: root-mean-square error of the price, in the currency of S (0.01 = one cent); > 0 and at least 0.0001 x S. Halving eps takes about four times as long.", _
            "Optional. Continuous dividend yield, annual, as a decimal (0.02 = 2%; above 1 is refused as percent); default 0.", _
            "Optional. Random seed, a whole number >= 0; default 0. The same inputs and seed give the same price at every recalculation; another seed gives an independent estimate.", _
            "Optional. For a date T: when to value, a date (its 16:00 New York close) or a date and time (New York). Empty: now, to the minute. Must come before the expiry. Not used with a year-fraction T.")
    Application.MacroOptions Macro:="'" & ThisWorkbook.Name & "'!MLMC_PUT", _
        Description:="European put by adaptive multilevel Monte Carlo (Giles; Milstein scheme, Black-Scholes dynamics) to a target RMS error eps. The same seed gives the same price. Its standard error: MLMC_STDERR with kind ""put"".", _
        Category:="optiond", _
        ArgumentDescriptions:=Array( _
            "Spot price of the underlying (> 0). A cell or a range: ranges broadcast against the other arguments and return a range of the same shape.", _
            "Strike price (> 0), in the currency of S. A column of strikes returns a column of results.", _
            "Time to expiry in years (> 0), e.g. 0.25 for three months (ACT/365), or the expiry date (a date cell, or a number >= 1000: an Excel date; its 16:00 New York close), T then counting in minutes/525,600 from valuation. Over 50 years: refused as days.", _
            "Risk-free rate, annual and continuously compounded, as a decimal (0.05 = 5%; above 1 is refused as percent); or a curve's handle (OPTIOND_CURVE): each option's r is the curve's zero rate at its T.", _
            "Volatility, annualised, as a decimal (0.2 = 20%); > 0 and <= 5.", _
            "Target accuracy: root-mean-square error of the price, in the currency of S (0.01 = one cent); > 0 and at least 0.0001 x S. Halving eps takes about four times as long.", _
            "Optional. Continuous dividend yield, annual, as a decimal (0.02 = 2%; above 1 is refused as percent); default 0.", _
            "Optional. Random seed, a whole number >= 0; default 0. The same inputs and seed give the same price at every recalculation; another seed gives an independent estimate.", _
            "Optional. For a date T: when to value, a date (its 16:00 New York close) or a date and time (New York). Empty: now, to the minute. Must come before the expiry. Not used with a year-fraction T.")
    Application.MacroOptions Macro:="'" & ThisWorkbook.Name & "'!MLMC_ASIAN_CALL", _
        Description:="Arithmetic-average Asian call (payoff: average of S over [0, T], continuously monitored, minus K) by adaptive multilevel Monte Carlo to a target RMS error eps. Standard error: MLMC_STDERR, payoff ""asian"".", _
        Category:="optiond", _
        ArgumentDescriptions:=Array( _
            "Spot price of the underlying (> 0). A cell or a range: ranges broadcast against the other arguments and return a range of the same shape.", _
            "Strike price (> 0), in the currency of S. A column of strikes returns a column of results.", _
            "Time to expiry in years (> 0), e.g. 0.25 for three months (ACT/365), or the expiry date (a date cell, or a number >= 1000: an Excel date; its 16:00 New York close), T then counting in minutes/525,600 from valuation. Over 50 years: refused as days.", _
            "Risk-free rate, annual and continuously compounded, as a decimal (0.05 = 5%; above 1 is refused as percent); or a curve's handle (OPTIOND_CURVE): each option's r is the curve's zero rate at its T.", _
            "Volatility, annualised, as a decimal (0.2 = 20%); > 0 and <= 5.", _
            "Target accuracy: root-mean-square error of the price, in the currency of S (0.01 = one cent); > 0 and at least 0.0001 x S. Halving eps takes about four times as long.", _
            "Optional. Continuous dividend yield, annual, as a decimal (0.02 = 2%; above 1 is refused as percent); default 0.", _
            "Optional. Random seed, a whole number >= 0; default 0. The same inputs and seed give the same price at every recalculation; another seed gives an independent estimate.", _
            "Optional. For a date T: when to value, a date (its 16:00 New York close) or a date and time (New York). Empty: now, to the minute. Must come before the expiry. Not used with a year-fraction T.")
    Application.MacroOptions Macro:="'" & ThisWorkbook.Name & "'!MLMC_DIGITAL_CALL", _
        Description:="Cash-or-nothing digital call paying 1 at T if S(T) > K, by adaptive multilevel Monte Carlo to a target RMS error eps. The same seed gives the same price. Standard error: MLMC_STDERR with payoff ""digital"".", _
        Category:="optiond", _
        ArgumentDescriptions:=Array( _
            "Spot price of the underlying (> 0). A cell or a range: ranges broadcast against the other arguments and return a range of the same shape.", _
            "Strike price (> 0), in the currency of S. A column of strikes returns a column of results.", _
            "Time to expiry in years (> 0), e.g. 0.25 for three months (ACT/365), or the expiry date (a date cell, or a number >= 1000: an Excel date; its 16:00 New York close), T then counting in minutes/525,600 from valuation. Over 50 years: refused as days.", _
            "Risk-free rate, annual and continuously compounded, as a decimal (0.05 = 5%; above 1 is refused as percent); or a curve's handle (OPTIOND_CURVE): each option's r is the curve's zero rate at its T.", _
            "Volatility, annualised, as a decimal (0.2 = 20%); > 0 and <= 5.", _
            "Target accuracy: root-mean-square error of the price (the digital pays 1), e.g. 0.001; > 0 and at least 0.0001. Halving eps takes about four times as long.", _
            "Optional. Continuous dividend yield, annual, as a decimal (0.02 = 2%; above 1 is refused as percent); default 0.", _
            "Optional. Random seed, a whole number >= 0; default 0. The same inputs and seed give the same price at every recalculation; another seed gives an independent estimate.", _
            "Optional. For a date T: when to value, a date (its 16:00 New York close) or a date and time (New York). Empty: now, to the minute. Must come before the expiry. Not used with a year-fraction T.")
    Application.MacroOptions Macro:="'" & ThisWorkbook.Name & "'!MLMC_STDERR", _
        Description:="Standard error of the multilevel Monte Carlo price that MLMC_CALL, MLMC_PUT, MLMC_ASIAN_CALL or MLMC_DIGITAL_CALL returns for the same arguments and seed: the same run, answered from the cache.", _
        Category:="optiond", _
        ArgumentDescriptions:=Array( _
            "Spot price of the underlying (> 0). A cell or a range: ranges broadcast against the other arguments and return a range of the same shape.", _
            "Strike price (> 0), in the currency of S. A column of strikes returns a column of results.", _
            "Time to expiry in years (> 0), e.g. 0.25 for three months (ACT/365), or the expiry date (a date cell, or a number >= 1000: an Excel date; its 16:00 New York close), T then counting in minutes/525,600 from valuation. Over 50 years: refused as days.", _
            "Risk-free rate, annual and continuously compounded, as a decimal (0.05 = 5%; above 1 is refused as percent); or a curve's handle (OPTIOND_CURVE): each option's r is the curve's zero rate at its T.", _
            "Volatility, annualised, as a decimal (0.2 = 20%); > 0 and <= 5.", _
            "The eps of the MLMC_ price whose standard error you want: target root-mean-square error, in the currency of S (in units of the payout 1 for the digital); > 0, at least 0.0001 x S (x 1 for the digital).", _
            "Optional. Continuous dividend yield, annual, as a decimal (0.02 = 2%; above 1 is refused as percent); default 0.", _
            "Optional. Random seed, a whole number >= 0; default 0. The same inputs and seed give the same price at every recalculation; another seed gives an independent estimate.", _
            "Optional. ""call"" (the default) or ""put"": the kind of the MLMC_ price.", _
            "Optional. The payoff of the MLMC_ price: ""vanilla"" (the default: MLMC_CALL, MLMC_PUT), ""asian"" (MLMC_ASIAN_CALL) or ""digital"" (MLMC_DIGITAL_CALL).", _
            "Optional. For a date T: when to value, a date (its 16:00 New York close) or a date and time (New York). Empty: now, to the minute. Must come before the expiry. Not used with a year-fraction T.")
    Application.MacroOptions Macro:="'" & ThisWorkbook.Name & "'!HESTON_CALL", _
        Description:="Call price in the Heston stochastic-volatility model: American (default) by ADI finite differences (200 x 100 grid, 100 steps), European by the semi-analytic formula (Lewis). Ranges return ranges.", _
        Category:="optiond", _
        ArgumentDescriptions:=Array( _
            "Spot price of the underlying (> 0). A cell or a range: ranges broadcast against the other arguments and return a range of the same shape.", _
            "Strike price (> 0), in the currency of S. A column of strikes returns a column of results.", _
            "Time to expiry in years (> 0), e.g. 0.25 for three months (ACT/365), or the expiry date (a date cell, or a number >= 1000: an Excel date; its 16:00 New York close), T then counting in minutes/525,600 from valuation. Over 50 years: refused as days.", _
            "Risk-free rate, annual and continuously compounded, as a decimal (0.05 = 5%; above 1 is refused as percent); or a curve's handle (OPTIOND_CURVE): each option's r is the curve's zero rate at its T.", _
            "Continuous dividend yield, annual, as a decimal (0.02 = 2%); 0 for none.", _
            "Heston initial variance (>= 0), annualised: today's volatility squared (0.04 = 20% volatility). Or a Heston set's handle (OPTIOND_HESTON), with kappa, theta, xi and rho left out.", _
            "Optional with a Heston handle as v0, else required. Heston mean-reversion speed of the variance, per year (> 0), e.g. 1.5.", _
            "Optional with a Heston handle as v0, else required. Heston long-run variance (>= 0), annualised (0.04 = 20% volatility). The variance stays off zero when 2 x kappa x theta >= xi^2 (Feller condition).", _
            "Optional with a Heston handle as v0, else required. Heston volatility of the variance (vol of vol, > 0), e.g. 0.3.", _
            "Optional with a Heston handle as v0, else required. Heston correlation of the underlying with its variance, from -1 to 1; negative (e.g. -0.7) gives the equity skew.", _
            "Optional. TRUE for American exercise (the default), FALSE for European.", _
            "Optional. ADI time-stepping scheme of American rows: ""mcs"" (Modified Craig-Sneyd, the default), ""hv"" (Hundsdorfer-Verwer), ""cs"" (Craig-Sneyd) or ""do"" (Douglas).", _
            "Optional. For a date T: when to value, a date (its 16:00 New York close) or a date and time (New York). Empty: now, to the minute. Must come before the expiry. Not used with a year-fraction T.")
    Application.MacroOptions Macro:="'" & ThisWorkbook.Name & "'!HESTON_PUT", _
        Description:="Put price in the Heston stochastic-volatility model: American (default) by ADI finite differences (200 x 100 grid, 100 steps), European by the semi-analytic formula (Lewis). Ranges return ranges.", _
        Category:="optiond", _
        ArgumentDescriptions:=Array( _
            "Spot price of the underlying (> 0). A cell or a range: ranges broadcast against the other arguments and return a range of the same shape.", _
            "Strike price (> 0), in the currency of S. A column of strikes returns a column of results.", _
            "Time to expiry in years (> 0), e.g. 0.25 for three months (ACT/365), or the expiry date (a date cell, or a number >= 1000: an Excel date; its 16:00 New York close), T then counting in minutes/525,600 from valuation. Over 50 years: refused as days.", _
            "Risk-free rate, annual and continuously compounded, as a decimal (0.05 = 5%; above 1 is refused as percent); or a curve's handle (OPTIOND_CURVE): each option's r is the curve's zero rate at its T.", _
            "Continuous dividend yield, annual, as a decimal (0.02 = 2%); 0 for none.", _
            "Heston initial variance (>= 0), annualised: today's volatility squared (0.04 = 20% volatility). Or a Heston set's handle (OPTIOND_HESTON), with kappa, theta, xi and rho left out.", _
            "Optional with a Heston handle as v0, else required. Heston mean-reversion speed of the variance, per year (> 0), e.g. 1.5.", _
            "Optional with a Heston handle as v0, else required. Heston long-run variance (>= 0), annualised (0.04 = 20% volatility). The variance stays off zero when 2 x kappa x theta >= xi^2 (Feller condition).", _
            "Optional with a Heston handle as v0, else required. Heston volatility of the variance (vol of vol, > 0), e.g. 0.3.", _
            "Optional with a Heston handle as v0, else required. Heston correlation of the underlying with its variance, from -1 to 1; negative (e.g. -0.7) gives the equity skew.", _
            "Optional. TRUE for American exercise (the default), FALSE for European.", _
            "Optional. ADI time-stepping scheme of American rows: ""mcs"" (Modified Craig-Sneyd, the default), ""hv"" (Hundsdorfer-Verwer), ""cs"" (Craig-Sneyd) or ""do"" (Douglas).", _
            "Optional. For a date T: when to value, a date (its 16:00 New York close) or a date and time (New York). Empty: now, to the minute. Must come before the expiry. Not used with a year-fraction T.")
    Application.MacroOptions Macro:="'" & ThisWorkbook.Name & "'!PARITY_FORWARD", _
        Description:="Forward and discount factor of one expiry from a strip of European call and put prices: a robust fit of put-call parity C - P = D (F - K), all strikes weighted equally. Returns a row: forward, discount factor.", _
        Category:="optiond", _
        ArgumentDescriptions:=Array( _
            "Strikes of one expiry's European calls and puts (> 0): one row or one column. A strike whose call or put cell is empty is left out; the 20 strikes nearest the money enter the fit.", _
            "Call prices (mids) at those strikes, in the currency of the strikes: a row or column of the same length as strikes.", _
            "Put prices (mids) at those strikes, in the currency of the strikes: a row or column of the same length as strikes.", _
            "Time to expiry of the strip in years (> 0), e.g. 0.25 for three months, or the expiry date (a date cell, or a number >= 1000: an Excel date; its 16:00 New York close), T then counting in minutes/525,600 from valuation.", _
            "Optional. Risk-free rate, annual and continuously compounded (0.05 = 5%): the discount factor is exp(-rate x T) and only the forward is fitted. Omitted: forward and discount factor are both fitted (at least 3 strikes).", _
            "Optional. For a date T: when to value, a date (its 16:00 New York close) or a date and time (New York). Empty: now, to the minute. Must come before the expiry. Not used with a year-fraction T.")
    Application.MacroOptions Macro:="'" & ThisWorkbook.Name & "'!SURFACE_FIT", _
        Description:="Fits a volatility surface (one arbitrage-free SVI smile per expiry) to a pasted option chain in the optiond daemon and keeps it under name. Returns its handle, e.g. SPY#0002: each refit bumps the version, so cells that refer to this one recalculate.", _
        Category:="optiond", _
        ArgumentDescriptions:=Array( _
            "Name to keep the surface under in the optiond daemon, e.g. ""SPY"" (1 to 64 of A-Z a-z 0-9 _ . : / -, case-sensitive). Fitting again under the name replaces the surface and bumps its version.", _
            "The option chain pasted with its header row, the columns of a chain CSV: underlying, quote_date, expiry, type, strike, bid, ask, last, implied_vol, underlying_price, style (quote_time, settlement optional). Empty rows are skipped.", _
            "Optional. When the chain was quoted: ""HH:MM"" New York time on its quote date (e.g. ""10:50""), a time cell, or an ISO 8601 timestamp. Omitted: the 16:00 close.", _
            "Optional. Risk-free rate, annual and continuously compounded (0.04 = 4%). Omitted: the default of optiond chain. The forward and carry of each expiry come from the chain itself.", _
            "Optional. ""pm"" (16:00) or ""am"" (09:30, AM-settled index series) for rows of the chain without a settlement column. Omitted: ""pm"".")
    Application.MacroOptions Macro:="'" & ThisWorkbook.Name & "'!SURFACE_VOL", _
        Description:="Implied volatility (annualised decimal) of a surface the optiond daemon keeps, at strike K and time T. Give the SURFACE_FIT cell (its handle) as name so this recalculates after a refit. Ranges return a range.", _
        Category:="optiond", _
        ArgumentDescriptions:=Array( _
            "The surface: the handle SURFACE_FIT returns (e.g. SPY#0002: refer to that cell, so this one recalculates after a refit) or its name (SPY: the live version). The handle of a replaced version is an error.", _
            "Strike (> 0), in the currency of the surface's underlying. A range returns a range of results, all from one daemon request.", _
            "Time to expiry in years (> 0), within the surface's first and last expiries (no extrapolation in time), or the expiry date (a date cell, or a number >= 1000; 16:00 New York) from valuation.", _
            "Optional. For a date T: when to value, a date (its 16:00 New York close) or a date and time (New York). Empty: now, to the minute. Must come before the expiry. Not used with a year-fraction T.")
    Application.MacroOptions Macro:="'" & ThisWorkbook.Name & "'!SURFACE_PRICE", _
        Description:="Option price at a daemon surface's volatility at (K, T), on its forward and rate at T: closed form if European, CRR tree (500 steps) if American. Give the SURFACE_FIT cell as name so this recalculates after a refit.", _
        Category:="optiond", _
        ArgumentDescriptions:=Array( _
            "The surface: the handle SURFACE_FIT returns (e.g. SPY#0002: refer to that cell, so this one recalculates after a refit) or its name (SPY: the live version). The handle of a replaced version is an error.", _
            "Strike (> 0), in the currency of the surface's underlying. A range returns a range of results, all from one daemon request.", _
            "Time to expiry in years (> 0), within the surface's first and last expiries (no extrapolation in time), or the expiry date (a date cell, or a number >= 1000; 16:00 New York) from valuation.", _
            """call"" or ""put"".", _
            "Optional. TRUE for American exercise (the default), FALSE for European.", _
            "Optional. For a date T: when to value, a date (its 16:00 New York close) or a date and time (New York). Empty: now, to the minute. Must come before the expiry. Not used with a year-fraction T.")
    Application.MacroOptions Macro:="'" & ThisWorkbook.Name & "'!OPTIOND_CURVE", _
        Description:="Keeps a zero-rate curve under name (in the optiond daemon, shared by every workbook; without one, in this Excel: NAME#0001@local). Returns its handle, e.g. USD#0003: give it as r to any pricing function.", _
        Category:="optiond", _
        ArgumentDescriptions:=Array( _
            "Name to keep the object under, e.g. ""USD"" (1 to 64 of A-Z a-z 0-9 _ . : / -, case-sensitive). Making it again with other values bumps the version; with the same values the handle stays.", _
            "The curve's tenors: calendar days from today (30, 91, 365...) or dates, distinct: a row or column.", _
            "Zero rate at each tenor, annual and continuously compounded, as a decimal (0.043 = 4.3%): a row or column of the same length. Between tenors the log discount r x t is linear; flat beyond.")
    Application.MacroOptions Macro:="'" & ThisWorkbook.Name & "'!OPTIOND_DIVIDENDS", _
        Description:="Keeps a cash-dividend schedule under name (in the optiond daemon; without one, in this Excel). Returns its handle, e.g. XYZ#0002: give it as q to BOPM_ and AMERICAN_ functions (spot model on the CRR tree).", _
        Category:="optiond", _
        ArgumentDescriptions:=Array( _
            "Name to keep the object under, e.g. ""USD"" (1 to 64 of A-Z a-z 0-9 _ . : / -, case-sensitive). Making it again with other values bumps the version; with the same values the handle stays.", _
            "Ex-dividend dates (date cells) or years from now (0.25 = in three months), ascending: a row or column of up to 64. An option gets those from now to its T (at most 8).", _
            "Cash dividend at each ex-date, in the currency of the underlying (>= 0): a row or column of the same length.")
    Application.MacroOptions Macro:="'" & ThisWorkbook.Name & "'!OPTIOND_HESTON", _
        Description:="Keeps a Heston parameter set under name (in the optiond daemon; without one, in this Excel). Returns its handle, e.g. SPX-H#0001: give it as v0 to HESTON_CALL or HESTON_PUT and leave kappa...rho out.", _
        Category:="optiond", _
        ArgumentDescriptions:=Array( _
            "Name to keep the object under, e.g. ""USD"" (1 to 64 of A-Z a-z 0-9 _ . : / -, case-sensitive). Making it again with other values bumps the version; with the same values the handle stays.", _
            "Heston initial variance (>= 0), annualised: today's volatility squared (0.04 = 20% volatility).", _
            "Heston mean-reversion speed of the variance, per year (> 0), e.g. 1.5.", _
            "Heston long-run variance (>= 0), annualised (0.04 = 20% volatility). The variance stays off zero when 2 x kappa x theta >= xi^2 (Feller condition).", _
            "Heston volatility of the variance (vol of vol, > 0), e.g. 0.3.", _
            "Heston correlation of the underlying with its variance, from -1 to 1; negative (e.g. -0.7) gives the equity skew.")
    Application.MacroOptions Macro:="'" & ThisWorkbook.Name & "'!HESTON_FIT", _
        Description:="Fits the European Heston model to a pasted European option chain (the chain job, then least squares on the out-of-the-money mids) and keeps the parameters under name (in the optiond daemon, or this Excel). Returns the handle: v0 of HESTON_CALL/PUT.", _
        Category:="optiond", _
        ArgumentDescriptions:=Array( _
            "Name to keep the object under, e.g. ""USD"" (1 to 64 of A-Z a-z 0-9 _ . : / -, case-sensitive). Making it again with other values bumps the version; with the same values the handle stays.", _
            "The option chain pasted with its header row, the columns of a chain CSV: underlying, quote_date, expiry, type, strike, bid, ask, last, implied_vol, underlying_price, style (quote_time, settlement optional). Empty rows are skipped.", _
            "Optional. When the chain was quoted: ""HH:MM"" New York time on its quote date (e.g. ""10:50""), a time cell, or an ISO 8601 timestamp. Omitted: the 16:00 close.", _
            "Optional. Risk-free rate, annual and continuously compounded (0.04 = 4%). Omitted: the default of optiond chain. The forward and carry of each expiry come from the chain itself.", _
            "Optional. ""pm"" (16:00) or ""am"" (09:30, AM-settled index series) for rows of the chain without a settlement column. Omitted: ""pm"".", _
            "Optional. TRUE to impose the Feller condition 2 x kappa x theta >= xi^2 (the variance stays off zero); FALSE (the default) fits freely. The summary in OPTIOND_OBJECTS says whether it holds.")
    Application.MacroOptions Macro:="'" & ThisWorkbook.Name & "'!OPTIOND_OBJECTS", _
        Description:="Lists the live market objects: a header row, then one row per object: handle, kind, summary, created (UTC). The daemon's first, then this Excel's own (handles ending @local). Recalculate (F9) to refresh.", _
        Category:="optiond", _
        ArgumentDescriptions:=Array( _
    Application.MacroOptions Macro:="'" & ThisWorkbook.Name & "'!OPTIOND_ERROR", _
        Description:="The message of an optiond error cell (its text after ""#optiond: ""); an Excel error value's own text (#N/A...); """" for a cell that holds no error. =OPTIOND_ERROR(A1)="""" tests a cell as IFERROR would.", _
        Category:="optiond", _
        ArgumentDescriptions:=Array( _
            "A cell (or range) a function of optiond returned: its errors read ""#optiond: <message>"", a short reason; this gives the message.")
End Sub
